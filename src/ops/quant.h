// Symmetric int8 quantisation (the W8A8 activation path): q = round(x / s) clamped to
// [-127, 127] with s = absmax / 127, per token (row) or per group of 32, 64 or 128 elements;
// and the expansion of stored weight formats (float types, GGML blocks) into float tensors.
#pragma once
#include "core/context.h"
#include "core/tensor.h"
#include "kernels/quant/dequant.h"

namespace lw::ops {

// x [rows, cols] f32/f16/bf16 -> q i8 [rows, cols], scales f32 [rows]. All on the device, contiguous.
void quantize_per_token(Context& ctx, const Tensor& x, const Tensor& q, const Tensor& scales);
// q i8 [rows, cols], scales f32 [rows] -> out [rows, cols] (f32/f16/bf16).
void dequantize_per_token(Context& ctx, const Tensor& q, const Tensor& scales, const Tensor& out);
// x [rows, cols] -> q i8 [rows, cols], scales f32 [rows, cols / group]; group 32, 64 or 128
// must divide cols.
void quantize_per_group(Context& ctx, const Tensor& x, int group, const Tensor& q, const Tensor& scales);
void dequantize_per_group(Context& ctx, const Tensor& q, const Tensor& scales, int group, const Tensor& out);

// FP8 E4M3 activations (the W8A8 FP8 path): x [rows, cols] f32/f16/bf16 -> q i8 [rows, cols]
// holding e4m3fn codes, scales f32 [cols / group, L] with L >= rows (group-major: the layout the
// vendor FP8 GEMMs read; columns past `rows` are left as they are), s = absmax / 448 per `group`
// consecutive elements of a row (group = cols: per token); group must divide cols. All on the
// device, contiguous.
void quantize_fp8(Context& ctx, const Tensor& x, int64_t group, const Tensor& q, const Tensor& scales);

// The stored formats `dequantize` expands: f32, f16, bf16 and GGML's q4_0, q4_1, q5_0, q5_1,
// q8_0, q2_k, q3_k, q4_k, q5_k, q6_k.
using kernels::BlockFormat;
using kernels::block_format_bytes;
using kernels::block_format_elems;
using kernels::block_format_name;

// out (f32/f16/bf16, contiguous, any shape) = the out.numel() elements stored in `raw` as
// `format` (GGML's block layout for the q formats), expanded in fp32 and rounded once to
// out's dtype. raw: the stored bytes, a contiguous 1-D i8 tensor on the device of exactly
// out.numel() / block elements * block bytes; out.numel() must be whole blocks.
void dequantize(Context& ctx, const Tensor& raw, BlockFormat format, const Tensor& out);

}  // namespace lw::ops
