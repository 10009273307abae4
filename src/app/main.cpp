// The lightwave command line: `info` (the build target and the device), `check` (runs the
// kernels on fresh random inputs against a float64 reference on this device), `generate` and
// `score` (app/generate.cpp), `bench` (app/bench.cpp), `serve` (app/serve.cpp).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <random>

#include "app/bench.h"
#include "app/generate.h"
#include "app/serve.h"
#include "core/context.h"
#include "core/logging.h"
#include "gpu/numeric.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

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

Tensor random_host(std::mt19937_64& rng, std::vector<int64_t> shape, DType dt) {
  Tensor t = Tensor::empty_host(std::move(shape), dt);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = dist(rng);
    switch (dt) {
      case DType::f32: t.data<float>()[i] = v; break;
      case DType::f16: t.data<lw::half>()[i] = lw::gpu::from_float<lw::half>(v); break;
      default: t.data<lw::bfloat16>()[i] = lw::gpu::from_float<lw::bfloat16>(v); break;
    }
  }
  return t;
}

double value(const Tensor& host, int64_t i) {
  switch (host.dtype()) {
    case DType::f32: return host.data<float>()[i];
    case DType::f16: return lw::gpu::to_float(host.data<lw::half>()[i]);
    default: return lw::gpu::to_float(host.data<lw::bfloat16>()[i]);
  }
}

// ||got - ref|| / ||ref||, infinite when got holds a NaN or Inf.
double rel_error(const Tensor& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = value(got, static_cast<int64_t>(i));
    if (!std::isfinite(g)) return INFINITY;
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

int cmd_check(int device, uint64_t seed) {
  lw::Context ctx(device);
  std::mt19937_64 rng(seed);
  std::printf("checking kernels on %s (%s target, warp %d), seed %llu\n", ctx.device_name().c_str(),
              lw::gpu::target_name(), ctx.warp_size(), static_cast<unsigned long long>(seed));
  std::printf("%-8s %-5s %-12s %12s %10s  %s\n", "op", "dtype", "shape", "rel.error", "bound", "result");
  int failures = 0;
  auto row = [&](const char* op, DType dt, const std::string& shape, double err, double bound) {
    const bool ok = err <= bound;
    failures += !ok;
    std::printf("%-8s %-5s %-12s %12.3e %10.1e  %s\n", op, lw::dtype_name(dt), shape.c_str(), err, bound,
                ok ? "ok" : "FAILED");
  };
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const double unit = dt == DType::f32 ? 0x1p-24 : dt == DType::f16 ? 0x1p-11 : 0x1p-8;
    const int64_t n = 100003;
    Tensor ah = random_host(rng, {n}, dt), bh = random_host(rng, {n}, dt);
    Tensor a = ctx.to_device(ah), b = ctx.to_device(bh), out = ctx.empty({n}, dt);
    lw::ops::add(ctx, a, b, out);
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = value(ah, i) + value(bh, i);
    row("add", dt, lw::shape_str({n}), rel_error(ctx.to_host(out), ref), unit);

    const int64_t rows = 37, cols = 4099;
    Tensor xh = random_host(rng, {rows, cols}, dt);
    Tensor x = ctx.to_device(xh), sums = ctx.empty({rows}, DType::f32);
    lw::ops::row_sum(ctx, x, sums);
    std::vector<double> rref(rows, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) rref[r] += value(xh, r * cols + c);
    row("row_sum", dt, lw::shape_str({rows, cols}), rel_error(ctx.to_host(sums), rref), 1e-5);
  }
  std::printf("%s\n", failures ? "some checks FAILED" : "all checks passed");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lightwave: a portable LLM inference engine (CUDA, HIP and a host SIMT emulator)"};
  app.require_subcommand(1);
  int device = 0;
  app.add_option("--device", device, "GPU index")->check(CLI::NonNegativeNumber);

  app.add_subcommand("info", "Print the build target and the device it runs on");
  uint64_t seed = std::random_device{}();
  auto* check = app.add_subcommand("check", "Run the kernels on random inputs against a float64 reference");
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
    return cmd_check(device, seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lightwave: error: %s\n", e.what());
    return 1;
  }
}
