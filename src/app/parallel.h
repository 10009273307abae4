// The tensor-parallel options every entry point takes.
#pragma once
#include <CLI/CLI.hpp>

namespace lw::app {

struct ParallelArgs {
  int tensor_parallel = 1;
};

void add_parallel_options(CLI::App* command, ParallelArgs& args);

}  // namespace lw::app
