// The model-facing subcommands of the command line: generate and score.
#pragma once
#include <CLI/CLI.hpp>

namespace lw::app {

// Registers `generate` and `score` on app; run_model_command runs whichever was given and
// returns the exit status, or -1 when neither was.
void add_model_commands(CLI::App& app);
int run_model_command(CLI::App& app, int device);

}  // namespace lw::app
