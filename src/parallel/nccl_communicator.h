// A rank of a group over NCCL (RCCL on HIP, which keeps NCCL's names): the vendors'
// collectives over NVLink, PCIe or the network, whichever NCCL finds between the ranks.
#pragma once
#include <array>
#include <memory>

#include "parallel/communicator.h"

namespace lw::parallel {

// The token every rank of one group starts from (NCCL's unique id): made once, by the rank
// that starts the group, and passed to the others (in-process, or over the rendezvous).
struct GroupId {
  std::array<char, 128> bytes{};
};

// Whether this build has NCCL / RCCL (a GPU target with the library found at configure time).
bool nccl_available();
GroupId nccl_group_id();
// Joins the group as `rank` of `size` on ctx's device; every rank must call it at about the
// same time (each on its own thread or process). Throws with NCCL's message on failure.
std::unique_ptr<Communicator> nccl_communicator(Context& ctx, const GroupId& id, int rank, int size);

}  // namespace lw::parallel
