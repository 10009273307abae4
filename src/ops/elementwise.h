// Elementwise ops on tensors: shape, dtype and device checks, then the kernel. Tensors are
// contiguous and on the device; float dtypes are f32, f16 and bf16; computation is in f32.
// An output may be the same tensor as an input (not for a cast between types). Outputs are
// passed as const Tensor&: the tensor's shape is not changed, only the memory it views.
#pragma once
#include "core/context.h"
#include "core/tensor.h"
#include "kernels/elementwise.h"

namespace lw::ops {

using kernels::Activation;

// out = a + b, out = a * b: same shape and dtype for all three.
void add(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
void mul(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
// residual += x (the residual connection, in place).
void residual_add(Context& ctx, const Tensor& residual, const Tensor& x);
// out = x * s.
void scale(Context& ctx, const Tensor& x, float s, const Tensor& out);
// out = x converted to out's dtype (any float type to any float type, round to nearest even).
void cast(Context& ctx, const Tensor& x, const Tensor& out);
// out = act(x): SiLU, GELU with the tanh approximation, or exact GELU (erf).
void activation(Context& ctx, Activation act, const Tensor& x, const Tensor& out);
// Gated activation: in [..., 2 * inter] (gate then up), out [..., inter] = act(gate) * up.
void act_mul(Context& ctx, Activation act, const Tensor& in, const Tensor& out);

// Fills out (float dtype, contiguous) with uniform values in [lo, hi) from `seed`; the same
// values on every target.
void fill_uniform(Context& ctx, const Tensor& out, float lo, float hi, uint64_t seed);

// out [tokens, hidden] += sigmoid(gate [tokens, 1]) * x [tokens, hidden] (Qwen2-MoE's gated
// shared expert); one float dtype.
void sigmoid_gated_add(Context& ctx, const Tensor& out, const Tensor& gate, const Tensor& x);

}  // namespace lw::ops
