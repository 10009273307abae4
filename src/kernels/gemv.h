// Skinny GEMM for decode: y[M, N] = x[M, K] @ w[N, K]^T (+ bias[N]) with M <= kGemvMaxRows.
// The weights are streamed once, at close to the memory bandwidth; x stays in cache.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

inline constexpr int kGemvMaxRows = 16;

// x rows are ldx elements apart, y rows ldy; w is contiguous [n, k]; bias may be null.
template <class T>
void gemv(T* y, const T* x, const T* w, const T* bias, int m, int64_t n, int64_t k, int64_t ldx, int64_t ldy,
          int warp_size, cudaStream_t stream);

// Grouped (mixture-of-experts) form: x [T, k] and y [T, n] contiguous, group z's rows
// [offsets[z], offsets[z + 1]) (device int32 [experts + 1], non-decreasing) meet w [z] of the
// contiguous [experts, n, k]. Any number of rows per group, rows_per_pass at a time (a hint:
// rounded up to 1, 2, 4, 8 or 16); no host synchronisation.
template <class T>
void grouped_gemv(T* y, const T* x, const T* w, const int32_t* offsets, int experts, int rows_per_pass, int64_t n,
                  int64_t k, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
