// `lightwave serve`: the OpenAI-compatible HTTP server.
#pragma once
#include <CLI/CLI.hpp>

namespace lw::app {

void add_serve_command(CLI::App& app);
// Runs `serve` when it was given; returns the exit status, or -1 when it was not.
int run_serve_command(CLI::App& app, int device);

}  // namespace lw::app
