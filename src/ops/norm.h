// Normalisation ops over the last dimension. x, out (and residual): same shape [..., hidden],
// same float dtype, contiguous, on the device; weight (and bias): [hidden], same dtype.
#pragma once
#include "core/context.h"
#include "core/tensor.h"

namespace lw::ops {

// out = RMSNorm(x) * weight (rounded to the dtype before the weight, as Hugging Face does).
void rms_norm(Context& ctx, const Tensor& x, const Tensor& weight, float eps, const Tensor& out);
// Fused residual form: residual += x (in place, rounded to the dtype); out = RMSNorm(residual).
void add_rms_norm(Context& ctx, const Tensor& x, const Tensor& residual, const Tensor& weight, float eps, const Tensor& out);
// out = LayerNorm(x) * weight + bias; pass an undefined Tensor() for no bias.
void layer_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, const Tensor& out);
// Fused residual form of layer_norm.
void add_layer_norm(Context& ctx, const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                    float eps, const Tensor& out);

}  // namespace lw::ops
