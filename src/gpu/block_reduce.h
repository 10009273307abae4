// Block-wide reductions for any block shape of up to 1024 threads, including blocks whose
// thread count is not a multiple of the warp size. Scratch is sized by the physical warp count.
// Every thread of the block must call, and every thread gets the result.
#pragma once
#include "gpu/warp.h"

namespace lw::gpu {

template <class T, class Op>
LW_DEVICE_INLINE T block_reduce(T v, Op op) {
  LW_SHARED(T, scratch, [kMaxWarpsPerBlock + 1]);
  const int tid = static_cast<int>(linear_thread_id());
  const int nthreads = static_cast<int>(block_threads());
  const int lane = tid % kWarpSize;
  const int warp = tid / kWarpSize;
  const int nwarps = (nthreads + kWarpSize - 1) / kWarpSize;
  const int lanes_here = nthreads - warp * kWarpSize < kWarpSize ? nthreads - warp * kWarpSize : kWarpSize;

  v = warp_reduce_first_lanes(v, op, lanes_here);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  // A block has at most 1024 / warp-size warps, which is never more than one warp's lanes.
  if (lane < nwarps && warp == 0) {
    const T total = warp_reduce_first_lanes(static_cast<T>(scratch[lane]), op, nwarps);
    if (lane == 0) scratch[kMaxWarpsPerBlock] = total;
  }
  __syncthreads();
  const T result = static_cast<T>(scratch[kMaxWarpsPerBlock]);
  __syncthreads();  // the scratch may be reused by the next call
  return result;
}

template <class T>
LW_DEVICE_INLINE T block_reduce_sum(T v) { return block_reduce(v, SumOp{}); }
template <class T>
LW_DEVICE_INLINE T block_reduce_max(T v) { return block_reduce(v, MaxOp{}); }
template <class T>
LW_DEVICE_INLINE T block_reduce_min(T v) { return block_reduce(v, MinOp{}); }

}  // namespace lw::gpu
