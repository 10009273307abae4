// Symmetric int8 quantisation: q = clamp(round_half_even(x / s), -127, 127), x ~ q * s, with
// s = absmax / 127 per token (row) or per group of consecutive elements of a row. An all-zero
// token or group gets s = 0 and q = 0.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// x [rows, cols] -> q [rows, cols], scales [rows]
template <class T>
void quantize_per_token(const T* x, int8_t* q, float* scales, int64_t rows, int64_t cols, int warp_size,
                        cudaStream_t stream);
// q [rows, cols], scales [rows] -> out [rows, cols]
template <class T>
void dequantize_per_token(const int8_t* q, const float* scales, T* out, int64_t rows, int64_t cols, int warp_size,
                          cudaStream_t stream);
// x [rows, cols] -> q [rows, cols], scales [rows, cols / group]; group 32, 64 or 128 divides cols
template <class T>
void quantize_per_group(const T* x, int8_t* q, float* scales, int64_t rows, int64_t cols, int group, int warp_size,
                        cudaStream_t stream);
template <class T>
void dequantize_per_group(const int8_t* q, const float* scales, T* out, int64_t rows, int64_t cols, int group,
                          int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
