// Row normalisations over the last dimension, computed in float. One block per row.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// RMSNorm: y = round(x * rsqrt(mean(x^2) + eps)) * w, rounding to T before the weight as
// Hugging Face's Llama/Qwen RMSNorm does. With `residual` (fused form): first
// residual = round(residual + x) in place, then y = norm(residual).
template <class T>
void rms_norm(T* out, const T* x, const T* weight, T* residual, float eps, int64_t rows, int64_t hidden,
              int warp_size, cudaStream_t stream);

// LayerNorm: y = (x - mean) / sqrt(var + eps) * w (+ b when bias is not null); var is the
// biased variance. `residual` as for rms_norm.
template <class T>
void layer_norm(T* out, const T* x, const T* weight, const T* bias, T* residual, float eps, int64_t rows,
                int64_t hidden, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
