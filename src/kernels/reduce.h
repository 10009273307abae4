// Reduction kernels. Raw-pointer entry points; shape and dtype checks live in ops/.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// out[r] = sum over c < cols of x[r * row_stride + c], accumulated in float; one block per row.
template <class T>
void row_sum(const T* x, float* out, int64_t rows, int64_t cols, int64_t row_stride, int warp_size,
             cudaStream_t stream);

}  // namespace lw::kernels
