// Thread-block clusters (NVIDIA compute capability 9.0+; launched through
// LaunchConfig::cluster_y): a barrier over the cluster's blocks and a float read from every
// block's shared memory. Device code of sm_90 and later only.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::gpu {

#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Every thread of every block of the cluster: the shared-memory writes before it are seen by
// the cluster's reads after it.
LW_DEVICE_INLINE void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// The float at shared-memory address `at` (this block's, from __cvta_generic_to_shared) of
// blocks 0 .. blocks - 1 of the cluster added in that order from 0.0f; all kMost loads are
// issued before the adds. blocks <= kMost.
template <int kMost>
LW_DEVICE_INLINE float cluster_sum_in_order(uint32_t at, int blocks) {
  float part[kMost];
#pragma unroll
  for (int b = 0; b < kMost; ++b) {
    part[b] = 0.0f;
    if (b < blocks) {
      uint32_t remote;
      asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(at), "r"(b));
      asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(part[b]) : "r"(remote) : "memory");
    }
  }
  float v = 0.0f;
#pragma unroll
  for (int b = 0; b < kMost; ++b)
    if (b < blocks) v += part[b];
  return v;
}
#endif

}  // namespace lw::gpu
