// Softmax over the last dimension.
#pragma once
#include "core/context.h"
#include "core/tensor.h"

namespace lw::ops {

// out = softmax(x / temperature) over the last dimension (log_softmax: its logarithm).
// x: f32/f16/bf16, contiguous, on the device; out: same shape, x's dtype or f32.
// temperature: finite and > 0. A row that is all -inf gives zeros (log: -inf), never NaN.
void softmax(Context& ctx, const Tensor& x, const Tensor& out, float temperature = 1.0f);
void log_softmax(Context& ctx, const Tensor& x, const Tensor& out, float temperature = 1.0f);

}  // namespace lw::ops
