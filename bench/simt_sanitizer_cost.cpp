// Cost of the emulator's sanitizer over plain emulation, per kernel: prints a table of the
// median wall time of each kernel with the sanitizer off and on. Host target only.
//     bench_simt_sanitizer [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/context.h"
#include "gpu/block_reduce.h"
#include "gpu/launch.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace {

constexpr int kTile = 32;  // lint: not-a-warp (a tile edge)

// A tiled transpose through shared memory: one checked shared read and write per element.
__global__ void transpose_kernel(const float* in, float* out, int rows, int cols) {
  LW_SHARED(float, tile, [kTile][kTile + 1]);
  const int x = static_cast<int>(blockIdx.x * kTile + threadIdx.x);
  const int y = static_cast<int>(blockIdx.y * kTile + threadIdx.y);
  if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[static_cast<int64_t>(y) * cols + x];
  __syncthreads();
  const int tx = static_cast<int>(blockIdx.y * kTile + threadIdx.x);
  const int ty = static_cast<int>(blockIdx.x * kTile + threadIdx.y);
  if (tx < rows && ty < cols) out[static_cast<int64_t>(ty) * rows + tx] = tile[threadIdx.x][threadIdx.y];
}

// The classic shared-memory tree reduction of a row (one block per row, 256 threads): every step
// halves the active threads, each does a checked read of two elements and a write, then a barrier.
constexpr int kTreeThreads = 256;
__global__ void tree_row_sum_kernel(const float* in, float* out, int cols) {
  LW_SHARED(float, partial, [kTreeThreads]);
  const int t = static_cast<int>(threadIdx.x);
  const float* row = in + static_cast<int64_t>(blockIdx.x) * cols;
  float v = 0.0f;
  for (int c = t; c < cols; c += kTreeThreads) v += row[c];
  partial[t] = v;
  __syncthreads();
  for (int s = kTreeThreads / 2; s > 0; s /= 2) {
    if (t < s) partial[t] = partial[t] + partial[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

double median_ms(int repeats, const std::function<void()>& f) {
  f();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  if (argc == 3 && std::strcmp(argv[1], "--repeats") == 0) repeats = std::max(1, std::atoi(argv[2]));
  lw::Context ctx;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto random_device_tensor = [&](std::vector<int64_t> shape) {
    lw::Tensor h = lw::Tensor::empty_host(std::move(shape), lw::DType::f32);
    for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = dist(rng);
    return ctx.to_device(h);
  };

  const int rows = 512, cols = 1024;
  lw::Tensor a = random_device_tensor({rows, cols}), b = random_device_tensor({rows, cols});
  lw::Tensor sum = ctx.empty({rows, cols}, lw::DType::f32), rs = ctx.empty({rows}, lw::DType::f32);
  lw::Tensor tr = ctx.empty({cols, rows}, lw::DType::f32);

  struct Case {
    std::string name;
    std::function<void()> run;
  };
  const std::vector<Case> cases = {
      {"add f32 512x1024 (no sync)", [&] { lw::ops::add(ctx, a, b, sum); }},
      {"row_sum f32 512x1024 (block reduce)", [&] { lw::ops::row_sum(ctx, a, rs); }},
      {"tree_sum f32 512x1024 (shared-memory tree)",
       [&] {
         lw::gpu::launch("tree_row_sum", tree_row_sum_kernel, {dim3(rows), dim3(kTreeThreads), 0, ctx.stream().get()},
                         a.data<float>(), rs.data<float>(), cols);
       }},
      {"transpose f32 512x1024 (shared tile)",
       [&] {
         lw::gpu::launch("transpose", transpose_kernel,
                         {dim3(cols / kTile, rows / kTile), dim3(kTile, kTile), 0, ctx.stream().get()}, a.data<float>(), tr.data<float>(),
                         rows, cols);
       }},
  };

  std::printf("SIMT emulator, warp %d, %d OS threads, median of %d runs\n", lw::simt::kWarpSize,
              lw::simt::worker_threads(), repeats);
  std::printf("%-44s %12s %14s %8s\n", "kernel", "plain ms", "sanitizer ms", "ratio");
  for (const Case& c : cases) {
    lw::simt::set_sanitize(false);
    const double plain = median_ms(repeats, c.run);
    lw::simt::set_sanitize(true);
    const double checked = median_ms(repeats, c.run);
    std::printf("%-44s %12.1f %14.1f %8.2f\n", c.name.c_str(), plain, checked, checked / plain);
  }
  return 0;
}
