// `lightwave bench`: latency at batch 1 and offline throughput of the serving engine.
#pragma once
#include <CLI/CLI.hpp>

namespace lw::app {

void add_bench_command(CLI::App& app);
// Runs `bench` when it was given; returns the exit status, or -1 when it was not.
int run_bench_command(CLI::App& app, int device);

}  // namespace lw::app
