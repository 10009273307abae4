// Reduction kernels, accumulating in float. Raw-pointer entry points; checks live in ops/.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

enum class Reduce : uint8_t { sum, max, min, absmax };

// out[r] = reduce over c < cols of x[r * row_stride + c]; one block per row.
template <class T>
void row_reduce(Reduce op, const T* x, float* out, int64_t rows, int64_t cols, int64_t row_stride, int warp_size,
                cudaStream_t stream);

// *out = reduce over all n elements of x (contiguous). Two launches: per-block partials into
// `partials` (at least tensor_reduce_partials() floats), then one block over the partials;
// the order is fixed, so results are identical run to run.
int tensor_reduce_partials();
template <class T>
void tensor_reduce(Reduce op, const T* x, int64_t n, float* partials, float* out, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
