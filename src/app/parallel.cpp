#include "app/parallel.h"

#include "core/logging.h"

namespace lw::app {

void add_parallel_options(CLI::App* command, ParallelArgs& args) {
  command
      ->add_option("--tensor-parallel-size,--tp", args.tensor_parallel,
                   "Split the model over this many GPUs in all (on each node, GPUs 0..N/nnodes-1)")
      ->check(CLI::PositiveNumber);
  command->add_option("--nnodes", args.nnodes, "Processes (hosts) the group spans")->check(CLI::PositiveNumber);
  command->add_option("--node-rank", args.node_rank, "This process's node: 0 runs the scheduler, the others follow it")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--dist-init-addr", args.init_addr, "host:port where node 0 meets the other nodes");
}

engine::Placement ParallelArgs::placement() const {
  LW_CHECK(nnodes == 1 || !init_addr.empty(), "--nnodes " << nnodes << " needs --dist-init-addr host:port");
  LW_CHECK(node_rank < nnodes, "--node-rank " << node_rank << " must be below --nnodes " << nnodes);
  return engine::Placement{tensor_parallel, nnodes, node_rank, init_addr};
}

bool follow_if_not_leader(engine::ModelRunner& runner) {
  if (runner.leader()) return false;
  runner.follow();
  log().info("node 0 ended the group");
  return true;
}

}  // namespace lw::app
