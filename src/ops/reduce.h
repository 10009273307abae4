// Reductions on tensors.
#pragma once
#include "core/context.h"
#include "core/tensor.h"

namespace lw::ops {

// out[r] = sum of row r of x. x: [rows, cols] f32/f16/bf16 on the device, rows contiguous
// (the row stride may be larger than cols); out: f32 [rows], contiguous, on the device.
void row_sum(Context& ctx, const Tensor& x, const Tensor& out);

}  // namespace lw::ops
