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

// FP8 E4M3 (e4m3fn) activations: x [rows, cols] -> q [rows, cols] e4m3fn codes (kernels/quant/fp8.h),
// scales [cols / group, scale_ld] (group-major: scales[g * scale_ld + row]; scale_ld >= rows),
// s = absmax / 448 per group of `group` consecutive elements of a row (group = cols: per token),
// q = nearest code to x / s. group divides cols; an all-zero group gets s = 0 and q = 0.
template <class T>
void quantize_fp8(const T* x, uint8_t* q, float* scales, int64_t scale_ld, int64_t rows, int64_t cols, int64_t group,
                  int warp_size, cudaStream_t stream);

// out[0..n) = *value (device memory): a per-tensor scale as a per-row vector.
void broadcast_scale(const float* value, float* out, int64_t n, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
