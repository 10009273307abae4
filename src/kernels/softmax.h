// Softmax and log-softmax over the last dimension, with a temperature, computed in float.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// out[r, :] = softmax(x[r, :] / temperature) (or its log). A row that is entirely -inf gives
// zeros (softmax) or -inf (log-softmax), never NaN. TOut is TIn or float.
template <class TOut, class TIn>
void softmax(TOut* out, const TIn* x, float temperature, bool log, int64_t rows, int64_t cols, int warp_size,
             cudaStream_t stream);

}  // namespace lw::kernels
