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

}  // namespace lw::kernels
