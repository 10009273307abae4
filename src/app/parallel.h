// The tensor-parallel options every entry point takes.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "engine/model_runner.h"

namespace lw::app {

struct ParallelArgs {
  int tensor_parallel = 1;
  int nnodes = 1, node_rank = 0;
  std::string init_addr;

  engine::Placement placement() const;
};

void add_parallel_options(CLI::App* command, ParallelArgs& args);

// On a node other than node 0 of a multi-node group: serves node 0's steps until it ends the
// group and returns true (the command has nothing else to do there).
bool follow_if_not_leader(engine::ModelRunner& runner);

}  // namespace lw::app
