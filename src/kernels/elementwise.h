// Elementwise kernels. Raw-pointer entry points; shape and dtype checks live in ops/.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// out[i] = a[i] + b[i] for i < n, computed in float. T: float, half, bfloat16.
template <class T>
void add(const T* a, const T* b, T* out, int64_t n, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
