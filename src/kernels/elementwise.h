// Elementwise kernels. Raw-pointer entry points over contiguous data; shape and dtype checks
// live in ops/. Every kernel computes in float. Outputs may alias inputs element for element.
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "kernels/activation.h"

namespace lw::kernels {

enum class MapOp : uint8_t { add, mul, scale, copy, silu, gelu_tanh, gelu_erf };

// out[i] = op(a[i], b[i]) for binary ops (add, mul), op(a[i]) for the others; scale
// multiplies by `scalar`; copy converts TIn to TOut (the cast). b is unused by unary ops.
template <class TOut, class TIn>
void map(MapOp op, TOut* out, const TIn* a, const TIn* b, float scalar, int64_t n, int warp_size,
         cudaStream_t stream);

// Gated activation over rows of [tokens, 2 * inter]: out[t, i] = act(in[t, i]) * in[t, inter + i].
template <class T>
void act_mul(Activation act, T* out, const T* in, int64_t tokens, int64_t inter, int warp_size, cudaStream_t stream);

// out[i] = lo + (hi - lo) * u(seed, i), u uniform in [0, 1) (Philox): the same values on
// every target.
template <class T>
void fill_uniform(T* out, int64_t n, float lo, float hi, uint64_t seed, int warp_size, cudaStream_t stream);

// Gated residual over rows of [tokens, hidden]: out[t, i] += sigmoid(gate[t]) * x[t, i].
template <class T>
void sigmoid_gated_add(T* out, const T* gate, const T* x, int64_t tokens, int64_t hidden, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
