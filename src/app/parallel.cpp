#include "app/parallel.h"

namespace lw::app {

void add_parallel_options(CLI::App* command, ParallelArgs& args) {
  command->add_option("--tensor-parallel-size,--tp", args.tensor_parallel,
                      "Split the model over this many GPUs of this host (ranks 0..N-1 on GPUs 0..N-1)")
      ->check(CLI::PositiveNumber);
}

}  // namespace lw::app
