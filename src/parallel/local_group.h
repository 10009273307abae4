// The ranks of a group as threads of one process, on the host target, where device memory is
// host memory: the collectives read each other's buffers directly. It runs the sharded model
// without GPUs (tests of the sharding logic); the sums run in rank order in float, so every
// rank gets the same bits.
#pragma once
#include <memory>

#include "parallel/communicator.h"

namespace lw::parallel {

class LocalGroup {
 public:
  // Throws on a GPU target: there the ranks talk through NCCL / RCCL.
  explicit LocalGroup(int size);
  ~LocalGroup();
  int size() const;
  // Rank `rank`'s communicator; the group must outlive it.
  std::unique_ptr<Communicator> communicator(int rank);

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace lw::parallel
