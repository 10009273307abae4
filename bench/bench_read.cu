// How fast a kernel can read S bytes once, for the sizes a decode GEMV reads (a few MB to a few
// hundred): the ceiling of a weight-streaming kernel of that size, beside a device-to-device
// copy of the same bytes and a 1 GiB copy, all in the same run. NVIDIA only (the bulk copies
// need compute capability 9.0). Ways of reading, each a kernel that XORs what it reads:
//   grid     every thread 16-byte loads in a grid-stride loop, U loads in flight (the copy's way)
//   runs     each warp one contiguous run, 512 bytes a load, D loads in flight (the int4 GEMV's
//            way: a warp streams its row tiles), 4 warps a block, the GEMV's 560 blocks
//   block-runs  the same loads, but each block one contiguous run, its warps' pieces side by side
//   bulk     each block one contiguous range, copied into a ring of shared memory by bulk copies
//            (cp.async.bulk, one thread issues, an mbarrier a stage), the block reads the ring
//   bulk-il  the same, chunks dealt to the blocks in turn, so the chip sweeps memory in order
// Timing as bench_gemm's: one back-to-back launch per buffer of a rotating set (256 MB or more,
// so the L2 holds none of them), divided by the launches; median of --repeats. "pdl" launches
// each kernel with gpu::kOverlapsPrior (a programmatic dependent launch) and issues its first
// reads before gpu::begin_after_prior_grid (as the int4 GEMV does), so consecutive kernels overlap.
//     bench_read [--sizes-mb 3.67,7.34,...] [--repeats N]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "gpu/launch.h"

namespace {

using lw::gpu::LaunchConfig;

constexpr uint32_t kNever = 0x9e3779b9u;  // an XOR no buffer gives in practice: keeps the reads live

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <bool kPdl>
__device__ __forceinline__ void after_prior() {
  if constexpr (kPdl) lw::gpu::begin_after_prior_grid();
}

__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

template <int U, bool kPdl>
__global__ void __launch_bounds__(256) grid_kernel(const uint4* src, int64_t n16, uint32_t* sink) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  bool waited = !kPdl;
  for (; i + (U - 1) * stride < n16; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = load_stream(src + i + u * stride);
    if (!waited) {
      after_prior<kPdl>();
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= fold(v[u]);
  }
  for (; i < n16; i += stride) acc ^= fold(load_stream(src + i));
  if (!waited) after_prior<kPdl>();
  if (acc == kNever) sink[blockIdx.x] = acc;
}

constexpr int kRunBlocks = 560, kRunWarps = 4;
// kBlockRuns: the block's warps' runs side by side instead (the block reads one contiguous range,
// 4 KiB a step, warp w the step's 512-byte pieces 2w and 2w + 1), so the warps resident together
// read neighbouring bytes.
template <int D, bool kPdl, bool kBlockRuns>
__global__ void __launch_bounds__(kRunWarps * 32) runs_kernel(const uint4* src, int64_t run16, int64_t n16, uint32_t* sink) {
  const int lane = threadIdx.x % 32;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kRunWarps + threadIdx.x / 32;
  uint32_t acc = 0;
  bool waited = !kPdl;
  if constexpr (kBlockRuns) {
    static_assert(D % 2 == 0, "two pieces a step");
    constexpr int64_t kStep = kRunWarps * 2 * 32;  // 16-byte units of a block's step
    const int64_t begin = static_cast<int64_t>(blockIdx.x) * kRunWarps * run16;
    const int64_t end = begin + kRunWarps * run16 < n16 ? begin + kRunWarps * run16 : n16;
    const int64_t mine = (threadIdx.x / 32) * 64 + lane;  // piece 2w's lane; piece 2w + 1 is 32 further
    int64_t s = begin;
    for (; s + (D / 2) * kStep <= end; s += (D / 2) * kStep) {
      uint4 v[D];
#pragma unroll
      for (int d = 0; d < D; ++d) v[d] = load_stream(src + s + (d / 2) * kStep + mine + 32 * (d % 2));
      if (!waited) {
        after_prior<kPdl>();
        waited = true;
      }
#pragma unroll
      for (int d = 0; d < D; ++d) acc ^= fold(v[d]);
    }
    for (; s < end; s += kStep)
      for (int c = 0; c < 2; ++c)
        if (s + mine + 32 * c < end) acc ^= fold(load_stream(src + s + mine + 32 * c));
    if (!waited) after_prior<kPdl>();
    if (acc == kNever) sink[warp] = acc;
    return;
  }
  const int64_t begin = warp * run16, end = begin + run16 < n16 ? begin + run16 : n16;
  int64_t i = begin + lane;
  for (; i + 32 * (D - 1) < end; i += 32 * D) {
    uint4 v[D];
#pragma unroll
    for (int d = 0; d < D; ++d) v[d] = load_stream(src + i + 32 * d);
    if (!waited) {
      after_prior<kPdl>();
      waited = true;
    }
#pragma unroll
    for (int d = 0; d < D; ++d) acc ^= fold(v[d]);
  }
  for (; i < end; i += 32) acc ^= fold(load_stream(src + i));
  if (!waited) after_prior<kPdl>();
  if (acc == kNever) sink[warp] = acc;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

constexpr int kBulkThreads = 128;
// Stages of kChunk bytes; kInterleaved: chunk c of the block is chunk c x gridDim.x + blockIdx.x
// of the buffer, else the block's own contiguous range of `per_block` bytes.
template <int kStages, int kChunk, bool kInterleaved, bool kPdl>
__global__ void __launch_bounds__(kBulkThreads) bulk_kernel(const uint8_t* src, int64_t bytes, int64_t per_block, uint32_t* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t full[kStages];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t total_chunks = (bytes + kChunk - 1) / kChunk;
  int64_t first, chunks, step;
  if constexpr (kInterleaved) {
    first = blockIdx.x;
    step = gridDim.x;
    chunks = first < total_chunks ? (total_chunks - first + step - 1) / step : 0;
  } else {
    first = static_cast<int64_t>(blockIdx.x) * (per_block / kChunk);
    step = 1;
    const int64_t stop = first + per_block / kChunk < total_chunks ? first + per_block / kChunk : total_chunks;
    chunks = stop > first ? stop - first : 0;
  }
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&full[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int64_t c) {
    const int s = static_cast<int>(c % kStages);
    const int64_t at = (first + c * step) * kChunk;
    const uint32_t size = static_cast<uint32_t>(bytes - at < kChunk ? bytes - at : kChunk);
    const uint32_t bar = smem_addr(&full[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(size) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(ring + s * kChunk)),
                 "l"(src + at), "r"(size), "r"(bar)
                 : "memory");
  };
  if (tid == 0)
    for (int64_t c = 0; c < kStages && c < chunks; ++c) issue(c);
  after_prior<kPdl>();
  uint32_t acc = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    const int s = static_cast<int>(c % kStages);
    const uint32_t parity = static_cast<uint32_t>((c / kStages) & 1);
    uint32_t done = 0;
    do {
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(smem_addr(&full[s])), "r"(parity)
          : "memory");
    } while (!done);
    const int64_t at = (first + c * step) * kChunk;
    const int size = static_cast<int>(bytes - at < kChunk ? bytes - at : kChunk);
    const uint4* stage = reinterpret_cast<const uint4*>(ring + s * kChunk);
    for (int o = tid; o < size / 16; o += kBulkThreads) acc ^= fold(stage[o]);
    __syncthreads();  // the stage is read before the next copy overwrites it
    if (tid == 0 && c + kStages < chunks) issue(c + kStages);
  }
  if (acc == kNever) sink[blockIdx.x] = acc;
#else
  (void)src, (void)bytes, (void)per_block, (void)sink;
#endif
}

__global__ void fill_kernel(uint32_t* p, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t z = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
    p[i] = static_cast<uint32_t>(z ^ (z >> 29));
  }
}

double median_ms(cudaStream_t stream, int repeats, int sets, const std::function<void(int)>& run) {
  for (int i = 0; i < sets; ++i) run(i);
  LW_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  LW_CUDA_CHECK(cudaEventCreate(&start));
  LW_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    LW_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int s = 0; s < sets; ++s) run(s);
    LW_CUDA_CHECK(cudaEventRecord(stop, stream));
    LW_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    LW_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    t.push_back(static_cast<double>(ms) / sets);
  }
  LW_CUDA_CHECK(cudaGetLastError());
  LW_CUDA_CHECK(cudaEventDestroy(start));
  LW_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Way {
  std::string name;
  std::function<void(const uint8_t* buf, int64_t bytes, cudaStream_t stream)> run;
};

template <int kStages, int kChunk, bool kInterleaved, bool kPdl>
Way bulk_way(const std::string& name, int sms, uint32_t* sink) {
  auto kernel = bulk_kernel<kStages, kChunk, kInterleaved, kPdl>;
  constexpr int shared = kStages * kChunk;
  lw::gpu::allow_dynamic_shared(kernel, shared);
  int per_sm = 0;
  LW_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBulkThreads, shared));
  const int blocks = sms * std::max(1, per_sm);
  return {name + " " + std::to_string(kStages) + "x" + std::to_string(kChunk / 1024) + "K" + (kPdl ? " pdl" : ""),
          [=](const uint8_t* buf, int64_t bytes, cudaStream_t stream) {
            const int64_t chunks = (bytes + kChunk - 1) / kChunk;
            const int64_t per_block = (chunks + blocks - 1) / blocks * kChunk;
            lw::gpu::launch("bulk_read", kernel, LaunchConfig(dim3(blocks), dim3(kBulkThreads), shared, stream, kPdl), buf,
                            bytes, per_block, sink);
          }};
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"Read bandwidth of the ways a kernel can stream S bytes, beside the copy"};
  std::vector<double> sizes_mb{3.67, 7.34, 14.68, 29.36, 58.72, 117.44, 234.88};  // 14336 x K / 2 for K = 512 .. 32768
  int repeats = 20;
  app.add_option("--sizes-mb", sizes_mb, "bytes read per launch, in MB (10^6)")->delimiter(',');
  app.add_option("--repeats", repeats, "timings per case (the median is printed)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  int device = 0;
  LW_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  LW_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (prop.major < 9) {
    std::fprintf(stderr, "bench_read: %s has compute capability %d.%d; the bulk copies need 9.0 or later\n", prop.name,
                 prop.major, prop.minor);
    return 2;
  }
  const int sms = prop.multiProcessorCount;
  cudaStream_t stream;
  LW_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint32_t* sink = nullptr;
  LW_CUDA_CHECK(cudaMalloc(&sink, 1 << 20));

  const double biggest = *std::max_element(sizes_mb.begin(), sizes_mb.end()) * 1e6;
  const int64_t pool_bytes = std::max<int64_t>(int64_t{1} << 30, static_cast<int64_t>(2 * biggest) + 4096);
  uint8_t *pool = nullptr, *dst = nullptr;
  LW_CUDA_CHECK(cudaMalloc(&pool, pool_bytes));
  LW_CUDA_CHECK(cudaMalloc(&dst, int64_t{1} << 30));
  lw::gpu::launch("fill", fill_kernel, LaunchConfig(dim3(4 * sms), dim3(256), 0, stream), reinterpret_cast<uint32_t*>(pool),
                  pool_bytes / 4);

  const int64_t gib = int64_t{1} << 30;
  const double copy_ms = median_ms(stream, repeats, 1, [&](int) {
    LW_CUDA_CHECK(cudaMemcpyAsync(dst, pool, gib, cudaMemcpyDeviceToDevice, stream));
  });
  const double copy_gbs = 2.0 * static_cast<double>(gib) / (copy_ms * 1e6);

  std::vector<Way> ways;
  auto grid_way = [&](bool pdl) {
    auto kernel = pdl ? grid_kernel<4, true> : grid_kernel<4, false>;
    int per_sm = 0;
    LW_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0));
    const int blocks = sms * per_sm;
    return Way{std::string("grid U4") + (pdl ? " pdl" : ""), [=](const uint8_t* buf, int64_t bytes, cudaStream_t s) {
                 lw::gpu::launch("grid_read", kernel, LaunchConfig(dim3(blocks), dim3(256), 0, s, pdl),
                                 reinterpret_cast<const uint4*>(buf), bytes / 16, sink);
               }};
  };
  auto runs_way = [&](bool pdl, bool block_runs) {
    auto kernel = block_runs ? (pdl ? runs_kernel<8, true, true> : runs_kernel<8, false, true>)
                             : (pdl ? runs_kernel<8, true, false> : runs_kernel<8, false, false>);
    return Way{std::string(block_runs ? "block-runs D8" : "runs D8") + (pdl ? " pdl" : ""),
               [=](const uint8_t* buf, int64_t bytes, cudaStream_t s) {
                 const int64_t n16 = bytes / 16, warps = int64_t{kRunBlocks} * kRunWarps;
                 const int64_t run16 = (n16 + warps - 1) / warps;
                 lw::gpu::launch("runs_read", kernel, LaunchConfig(dim3(kRunBlocks), dim3(kRunWarps * 32), 0, s, pdl),
                                 reinterpret_cast<const uint4*>(buf), run16, n16, sink);
               }};
  };
  ways.push_back(grid_way(false));
  ways.push_back(grid_way(true));
  ways.push_back(runs_way(false, false));
  ways.push_back(runs_way(true, false));
  ways.push_back(runs_way(false, true));
  ways.push_back(runs_way(true, true));
  ways.push_back(bulk_way<4, 8192, false, false>("bulk", sms, sink));
  ways.push_back(bulk_way<4, 8192, false, true>("bulk", sms, sink));
  ways.push_back(bulk_way<4, 16384, false, true>("bulk", sms, sink));
  ways.push_back(bulk_way<8, 4096, false, true>("bulk", sms, sink));
  ways.push_back(bulk_way<4, 8192, true, false>("bulk-il", sms, sink));
  ways.push_back(bulk_way<4, 8192, true, true>("bulk-il", sms, sink));

  std::printf("device %s, %d multiprocessors, median of %d runs; 1 GiB copy %.0f GB/s (read + written)\n", prop.name, sms,
              repeats, copy_gbs);
  std::printf("read GB/s (%% of the 1 GiB copy) per way; \"copy\" = a device-to-device copy of the same bytes, read + written\n\n");
  std::printf("| MB | copy |");
  for (const Way& w : ways) std::printf(" %s |", w.name.c_str());
  std::printf("\n| --- | --- |");
  for (size_t i = 0; i < ways.size(); ++i) std::printf(" --- |");
  std::printf("\n");
  for (double mb : sizes_mb) {
    const int64_t bytes = static_cast<int64_t>(mb * 1e6) / 4096 * 4096;
    const int sets = static_cast<int>(std::clamp<int64_t>((pool_bytes - 4096) / bytes, 1, 256));
    auto at = [&](int i) { return pool + static_cast<int64_t>(i) * bytes; };
    const double c_ms = median_ms(stream, repeats, sets, [&](int i) {
      LW_CUDA_CHECK(cudaMemcpyAsync(dst, at(i), std::min(bytes, gib), cudaMemcpyDeviceToDevice, stream));
    });
    const double c_gbs = 2.0 * static_cast<double>(std::min(bytes, gib)) / (c_ms * 1e6);
    std::printf("| %.2f | %.0f (%.1f%%) |", static_cast<double>(bytes) / 1e6, c_gbs, 100.0 * c_gbs / copy_gbs);
    for (const Way& w : ways) {
      const double ms = median_ms(stream, repeats, sets, [&](int i) { w.run(at(i), bytes, stream); });
      const double gbs = static_cast<double>(bytes) / (ms * 1e6);
      std::printf(" %.0f (%.1f%%, %.1f us) |", gbs, 100.0 * gbs / copy_gbs, ms * 1e3);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  LW_CUDA_CHECK(cudaFree(pool));
  LW_CUDA_CHECK(cudaFree(dst));
  LW_CUDA_CHECK(cudaFree(sink));
  LW_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_read: %s\n", e.what());
    return 1;
  }
}
