// The last block of a group to finish: blocks that each leave partial results in global memory
// count themselves on a counter, and the one that counts last combines the results.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::gpu {

// Whether this block is the last of the `blocks` blocks counting on `*count` (zero before the
// first of them) to get here. Every thread of the block calls it after its writes that the last
// block reads; the last block sees every counted block's writes in its loads after the call,
// and sets the count back to zero for the next launch.
//
// NVIDIA: a block barrier, then one acquire-release add by thread 0 (the release covers the
// writes of the block's threads ordered before it by the barrier, the acquire the writes of
// the blocks counted before: PTX's memory model), then a barrier. With every thread fencing
// (__threadfence, fence.sc) before the count and the last block's threads again after it, the
// int4 GEMV took 0.3-0.5 us (1-6%) longer on the H200 (docs/PERFORMANCE.md).
LW_DEVICE_INLINE bool last_to_arrive(int32_t* count, int blocks) {
  LW_SHARED(int, last, [1]);
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    int prior = 0;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(prior) : "l"(count) : "memory");
    last[0] = prior == blocks - 1;
    if (last[0]) *count = 0;  // every block has counted
  }
  __syncthreads();
  return last[0] != 0;
#else
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    last[0] = atomicAdd(count, 1) == blocks - 1;
    if (last[0]) *count = 0;  // every block has counted
  }
  __syncthreads();
  if (last[0] == 0) return false;
  __threadfence();
  return true;
#endif
}

}  // namespace lw::gpu
