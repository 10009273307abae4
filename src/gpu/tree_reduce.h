// Block reductions in a fixed pairwise order that does not depend on the warp size, for
// results that must be bit-identical on every target (the shuffle trees of block_reduce.h
// pair values differently at warp 32 and 64). The block's thread count must be a power of
// two; every thread calls and gets the result; scratch is shared memory of one element per
// thread (an LW_SHARED array).
#pragma once
#include "gpu/warp.h"

namespace lw::gpu {

template <class T, class Scratch, class Op>
LW_DEVICE_INLINE T tree_reduce(T v, Scratch scratch, Op op) {
  const int tid = static_cast<int>(linear_thread_id());
  const int n = static_cast<int>(block_threads());
  scratch[tid] = v;
  __syncthreads();
  for (int stride = n / 2; stride > 0; stride /= 2) {
    if (tid < stride) scratch[tid] = op(static_cast<T>(scratch[tid]), static_cast<T>(scratch[tid + stride]));
    __syncthreads();
  }
  const T r = scratch[0];
  __syncthreads();
  return r;
}

}  // namespace lw::gpu
