#include "gpu/runtime.h"

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
}

}  // namespace lw::gpu
