#include "gpu/runtime.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <unordered_map>

namespace lw::gpu {

const char* target_name() {
#if defined(LW_TARGET_HIP)
  return "hip";
#elif defined(LW_TARGET_HOST)
  return "host";
#else
  return "cuda";
#endif
}

int device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

int warp_size(int device) {
  int ws = 0;
  LW_CUDA_CHECK(cudaDeviceGetAttribute(&ws, cudaDevAttrWarpSize, device));
  LW_CHECK(ws == 32 || ws == 64, "device " << device << " reports warp size " << ws << "; lightwave supports 32 and 64");
  return ws;
}

int round_block_size(int threads, int warp_size) {
  LW_CHECK(warp_size > 0, "warp size must be positive, got " << warp_size);
  LW_CHECK(threads >= 0, "thread count must be >= 0, got " << threads);
  const int r = (threads + warp_size - 1) / warp_size * warp_size;
  return r < warp_size ? warp_size : r;
}

}  // namespace lw::gpu

#include "gpu/launch_config.h"

namespace lw::gpu {

void raise_dynamic_shared_limit(const void* kernel, size_t bytes) {
  constexpr size_t kDefault = 48 * 1024;
#if defined(LW_TARGET_CUDA)
  // Per device and kernel: the limit set so far (the default until raised).
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, size_t> limits;
  int device = 0;
  LW_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mu);
  auto it = limits.find({device, kernel});
  if (it == limits.end()) {
    cudaFuncAttributes attr{};
    LW_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    it = limits.emplace(std::pair{device, kernel}, attr.sharedSizeBytes < kDefault ? kDefault - attr.sharedSizeBytes : 0).first;
  }
  if (bytes <= it->second) return;
  LW_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  it->second = bytes;
#else
  if (bytes <= kDefault || kEmulator) return;
  LW_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
#endif
}

bool overlapped_launch(const void* kernel, cudaStream_t stream) {
#if defined(LW_TARGET_CUDA)
  static const bool wanted = [] {
    const char* env = std::getenv("LW_OVERLAPPED_LAUNCH");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  if (!wanted) return false;
  constexpr int kDevices = 64;
  static std::atomic<int8_t> known[kDevices] = {};  // 0 unknown, 1 no, 2 yes
  int device = 0;
  LW_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kDevices) return false;
  int8_t k = known[device].load(std::memory_order_relaxed);
  if (k == 0) {
    int major = 0;
    LW_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    k = major >= 9 ? 2 : 1;
    known[device].store(k, std::memory_order_relaxed);
  }
  if (k != 2) return false;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LW_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return false;
  // The PTX architecture each kernel was compiled for (the wait is compiled in from 9.0 on).
  static std::mutex mu;
  static std::unordered_map<const void*, bool> compiled;
  std::lock_guard lock(mu);
  auto it = compiled.find(kernel);
  if (it == compiled.end()) {
    cudaFuncAttributes attr{};
    LW_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    it = compiled.emplace(kernel, attr.ptxVersion >= 90).first;
  }
  return it->second;
#else
  (void)kernel, (void)stream;
  return false;
#endif
}

int most_cluster_blocks(const void* kernel, const LaunchConfig& cfg) {
#if defined(LW_TARGET_CUDA)
  static const bool wanted = [] {
    const char* env = std::getenv("LW_SPLIT_CLUSTERS");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  if (!wanted) return 1;
  int device = 0;
  LW_CUDA_CHECK(cudaGetDevice(&device));
  const unsigned threads = cfg.block.x * cfg.block.y * cfg.block.z;
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, unsigned, size_t>, int> known;
  std::lock_guard lock(mu);
  const auto key = std::tuple{device, kernel, threads, cfg.shared_bytes};
  if (auto it = known.find(key); it != known.end()) return it->second;
  int most = 1, major = 0;
  LW_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  cudaFuncAttributes attr{};
  LW_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  if (major >= 9 && attr.ptxVersion >= 90) {
    // The largest portable size whose clusters the device can hold at least one of at a time.
    for (int size = static_cast<int>(kMostClusterBlocks); size >= 2 && most == 1; --size) {
      cudaLaunchAttribute attribute[1];
      attribute[0].id = cudaLaunchAttributeClusterDimension;
      attribute[0].val.clusterDim.x = 1;
      attribute[0].val.clusterDim.y = static_cast<unsigned>(size);
      attribute[0].val.clusterDim.z = 1;
      cudaLaunchConfig_t lc{};
      lc.gridDim = dim3(1, static_cast<unsigned>(size), 1);
      lc.blockDim = cfg.block;
      lc.dynamicSmemBytes = cfg.shared_bytes;
      lc.attrs = attribute;
      lc.numAttrs = 1;
      int clusters = 0;
      const cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &lc);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();  // a size the device refuses: try a smaller one
        continue;
      }
      if (clusters > 0) most = size;
    }
  }
  known.emplace(key, most);
  return most;
#else
  (void)kernel, (void)cfg;
  return 1;
#endif
}

void check_launch_config(const char* kernel, const LaunchConfig& cfg) {
  const dim3 g = cfg.grid, b = cfg.block;
  LW_CHECK(g.x >= 1 && g.y >= 1 && g.z >= 1 && b.x >= 1 && b.y >= 1 && b.z >= 1,
           "launch of " << kernel << ": grid (" << g.x << "," << g.y << "," << g.z << ") and block (" << b.x << ","
                        << b.y << "," << b.z << ") dimensions must all be >= 1");
  const unsigned long long threads = 1ull * b.x * b.y * b.z;
  LW_CHECK(threads <= static_cast<unsigned long long>(kMaxBlockThreads),
           "launch of " << kernel << ": a block of " << threads << " threads exceeds the limit of " << kMaxBlockThreads);
  LW_CHECK(b.z <= 64, "launch of " << kernel << ": block z dimension " << b.z << " exceeds 64");
  LW_CHECK(g.y <= 65535 && g.z <= 65535,
           "launch of " << kernel << ": grid y/z dimensions (" << g.y << ", " << g.z << ") exceed 65535");
  LW_CHECK(g.x <= 0x7fffffffu, "launch of " << kernel << ": grid x dimension " << g.x << " exceeds 2^31-1");
  LW_CHECK(cfg.cluster_y >= 1 && cfg.cluster_y <= kMostClusterBlocks && g.y % cfg.cluster_y == 0,
           "launch of " << kernel << ": clusters of " << cfg.cluster_y << " blocks along y (at most " << kMostClusterBlocks
                        << ") must divide grid y "
                        << g.y);
#if !defined(LW_TARGET_CUDA)
  LW_CHECK(cfg.cluster_y == 1, "launch of " << kernel << ": clusters of blocks are CUDA's (compute capability 9.0 and later); this "
                                            << target_name() << " build has none");
#endif
}

}  // namespace lw::gpu
