// The activations of gated MLPs, in one place for act_mul and for the kernels that take the
// gated product as they load their input (the int4 streamed GEMV), so that both compute and
// round the same values.
#pragma once
#include <cmath>
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

enum class Activation : uint8_t { silu, gelu_tanh, gelu_erf };

LW_DEVICE_INLINE float silu(float x) { return x / (1.0f + expf(-x)); }
LW_DEVICE_INLINE float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
LW_DEVICE_INLINE float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }

LW_DEVICE_INLINE float activate(Activation act, float x) {
  return act == Activation::silu ? silu(x) : act == Activation::gelu_tanh ? gelu_tanh(x) : gelu_erf(x);
}

// The gated product of one element, act(gate) * up in fp32: the caller rounds it once to its type.
LW_DEVICE_INLINE float gated(Activation act, float gate, float up) { return activate(act, gate) * up; }

}  // namespace lw::kernels
