// Collectives between the ranks of a tensor-parallel group. Each rank holds one
// Communicator and calls the collectives in the same order as every other rank; the work is
// queued on the rank's stream like a kernel.
#pragma once
#include <memory>
#include <string>

#include "core/context.h"
#include "core/tensor.h"

namespace lw::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }

  // x = the sum of every rank's x, in place (a contiguous float tensor on the device).
  virtual void all_reduce_sum(Context& ctx, const Tensor& x) = 0;
  // out [size * n, ...] = every rank's `in` [n, ...], in rank order (contiguous, one dtype).
  virtual void all_gather(Context& ctx, const Tensor& in, const Tensor& out) = 0;
  // Waits for the rank's stream and reports a failed group (a peer gone, a timeout) as
  // lw::Error instead of waiting forever.
  virtual void synchronize(Context& ctx) = 0;
  // Ends this rank's part in the group: collectives in flight return with an error and later
  // ones throw. Any thread may call it (the group's supervisor, when another rank failed).
  virtual void abort(const std::string& why) = 0;

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}
  void check_all_reduce(const Tensor& x) const;
  void check_all_gather(const Tensor& in, const Tensor& out) const;

 private:
  int rank_, size_;
};

// Seconds a rank waits for the group before it declares it failed: LW_DIST_TIMEOUT, 600 by
// default (a first collective may wait for slow peers to load their weights).
double group_timeout_seconds();

}  // namespace lw::parallel
