// Reductions on tensors, accumulated in float.
#pragma once
#include "core/context.h"
#include "core/tensor.h"
#include "kernels/reduce.h"

namespace lw::ops {

using kernels::Reduce;  // sum, max, min, absmax (max of |x|)

// out[r] = op over row r of x. x: [rows, cols] f32/f16/bf16 on the device, rows contiguous
// (the row stride may be larger than cols); out: f32 [rows], contiguous, on the device.
// An empty row gives the identity (0 for sum and absmax, -inf for max, +inf for min).
void row_reduce(Context& ctx, Reduce op, const Tensor& x, const Tensor& out);
void row_sum(Context& ctx, const Tensor& x, const Tensor& out);

// out (f32 [1] on the device) = op over every element of x (contiguous, on the device);
// deterministic (a fixed two-pass order).
void tensor_reduce(Context& ctx, Reduce op, const Tensor& x, const Tensor& out);

}  // namespace lw::ops
