// Elementwise ops on tensors: shape, dtype and device checks, then the kernel.
#pragma once
#include "core/context.h"
#include "core/tensor.h"

namespace lw::ops {

// out = a + b. All three: same shape, same float dtype (f32, f16, bf16), contiguous, on the device.
void add(Context& ctx, const Tensor& a, const Tensor& b, Tensor& out);

}  // namespace lw::ops
