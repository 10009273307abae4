// The lightwave command line: `info` (the build target and the device), `check` (every op
// family on fresh random inputs against a float64 reference on this device, app/check.cpp),
// `generate` and `score` (app/generate.cpp), `bench` (app/bench.cpp), `serve` (app/serve.cpp).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <random>

#include "app/bench.h"
#include "app/check.h"
#include "app/generate.h"
#include "app/serve.h"
#include "core/context.h"
#include "core/logging.h"

namespace {

using lw::DType;
using lw::Tensor;

int cmd_info(int device) {
  lw::Context ctx(device);
  const lw::gpu::DeviceCaps& c = ctx.caps();
  const double kib = 1024.0, gib = 1024.0 * 1024.0 * 1024.0;
  std::printf("lightwave %s\n", LW_VERSION);
  std::printf("target        %s\n", lw::gpu::target_name());
  std::printf("device        %d: %s\n", device, c.name.c_str());
  std::printf("vendor        %s%s\n", lw::gpu::vendor_name(c.vendor), c.emulator() ? " (kernels run on the CPU)" : "");
  std::printf("architecture  %s (%d)\n", c.arch.c_str(), c.arch_number);
  std::printf("warp size     %d\n", c.warp_size);
  std::printf("processors    %d\n", c.multiprocessors);
  std::printf("shared memory %.0f KiB per block, %.0f KiB opt-in\n", c.shared_memory_per_block / kib,
              c.shared_memory_per_block_optin / kib);
  std::printf("memory        %.1f GiB\n", static_cast<double>(c.global_memory) / gib);
  if (c.memory_bus_width_bits > 0 && c.memory_clock_khz > 0)
    std::printf("memory bus    %d-bit at %d MHz, %.0f GB/s peak\n", c.memory_bus_width_bits, c.memory_clock_khz / 1000,
                c.peak_bandwidth_gb_per_s());
  if (c.l2_cache > 0) std::printf("L2 cache      %.1f MiB\n", static_cast<double>(c.l2_cache) / (kib * kib));
  std::printf("matrix cores  %s\n", c.matrix.describe().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lightwave: a portable LLM inference engine (CUDA, HIP and a host SIMT emulator)"};
  app.require_subcommand(1);
  int device = 0;
  app.add_option("--device", device, "GPU index")->check(CLI::NonNegativeNumber);

  app.add_subcommand("info", "Print the build target and the device it runs on");
  uint64_t seed = std::random_device{}();
  auto* check = app.add_subcommand("check", "Run every op family on random inputs against a float64 reference");
  check->add_option("--seed", seed, "Random seed (default: fresh)");

  lw::app::add_model_commands(app);
  lw::app::add_bench_command(app);
  lw::app::add_serve_command(app);

  CLI11_PARSE(app, argc, argv);
  try {
    if (app.got_subcommand("info")) return cmd_info(device);
    if (const int status = lw::app::run_model_command(app, device); status >= 0) return status;
    if (const int status = lw::app::run_bench_command(app, device); status >= 0) return status;
    if (const int status = lw::app::run_serve_command(app, device); status >= 0) return status;
    return lw::app::run_check(device, seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lightwave: error: %s\n", e.what());
    return 1;
  }
}
