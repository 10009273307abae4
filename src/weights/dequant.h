// Device conversion of raw checkpoint bytes into a float tensor.
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "weights/checkpoint.h"

namespace lw::weights::kernels {

// out[i] = element i of `src` (n elements stored as `type`: f32, f16, bf16, q8_0, q4_0 or
// q4_1, in the file's block layout), rounded to T. `src` is device memory.
template <class T>
void dequantize(T* out, const void* src, FileDType type, int64_t n, int warp_size, cudaStream_t stream);

}  // namespace lw::weights::kernels
