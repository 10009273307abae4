// Symmetric int8 quantisation (the W8A8 activation path): q = round(x / s) clamped to
// [-127, 127] with s = absmax / 127, per token (row) or per group of 32, 64 or 128 elements.
#pragma once
#include "core/context.h"
#include "core/tensor.h"

namespace lw::ops {

// x [rows, cols] f32/f16/bf16 -> q i8 [rows, cols], scales f32 [rows]. All on the device, contiguous.
void quantize_per_token(Context& ctx, const Tensor& x, const Tensor& q, const Tensor& scales);
// q i8 [rows, cols], scales f32 [rows] -> out [rows, cols] (f32/f16/bf16).
void dequantize_per_token(Context& ctx, const Tensor& q, const Tensor& scales, const Tensor& out);
// x [rows, cols] -> q i8 [rows, cols], scales f32 [rows, cols / group]; group 32, 64 or 128
// must divide cols.
void quantize_per_group(Context& ctx, const Tensor& x, int group, const Tensor& q, const Tensor& scales);
void dequantize_per_group(Context& ctx, const Tensor& q, const Tensor& scales, int group, const Tensor& out);

}  // namespace lw::ops
