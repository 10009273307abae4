// The 4-bit GEMM on NVIDIA Hopper's warpgroup multiply (gpu/wgmma.h, sm_90a): int4_gemm's
// arithmetic (exact weights: zero points subtracted in T, each group's fp32 products scaled by
// their rows' scales when the group ends; the same k splits, added in split order) over any rows
// of x: each multiply takes one 16-row tile of weights a warp (64 rows a warpgroup), its A
// fragments decoded in registers, and up to 64 rows of x as B from a 128-byte swizzled ring of
// shared memory. The ring and streamed kernels of kernels/quant/int4.cu (the matrix-fragment
// layer) are its oracle; int4_gemm runs it when asked for Int4GemmKernel::hopper. Built where
// the CUDA architectures include 90 (LW_HOPPER_INT4; the file is compiled for sm_90a alone),
// absent on HIP and the emulator.
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "kernels/quant/int4.h"

namespace lw::kernels {

#if defined(LW_HOPPER_INT4)
inline constexpr bool kInt4HopperBuilt = true;
#else
inline constexpr bool kInt4HopperBuilt = false;
#endif

// Whether the Hopper kernel reads this matrix: groups of whole 64-column tiles, or one group.
inline bool int4_hopper_serves(const Int4Matrix& w) {
  const int64_t group_cols = w.group < w.k ? w.group : w.k;
  return group_cols > 0 && (group_cols % kInt4TileCols == 0 || group_cols >= w.k);
}

#if defined(LW_HOPPER_INT4)
// y[m, n] = x[m, k] @ W^T (+ bias), as int4_gemm (whose checks it relies on: call it through
// int4_gemm). `splits` > 1 writes the splits' fp32 partial sums to `workspace` ([splits, m, n]),
// which the caller adds (int4_gemm's second launch). Runs on sm_90 devices only (refused
// elsewhere; callers choose it by gpu::DeviceCaps::matrix.wgmma).
template <class T>
void int4_hopper_gemm(T* y, const T* x, const Int4Matrix& w, const T* bias, int64_t m, int64_t ldx, int64_t ldy, int splits,
                      float* workspace, cudaStream_t stream);
#endif

}  // namespace lw::kernels
