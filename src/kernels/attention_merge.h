// The merge of a split attention row: each partition of the context leaves its output
// normalised by its own sum, its score maximum (log2 units) and its sum; the whole row is their
// average weighted by sum * 2^(max - overall max). Shared by the split kernels.
#pragma once
#include <cmath>

#include "gpu/compat.h"
#include "gpu/numeric.h"

namespace lw::kernels {

// One query row and head: out_parts [parts][head_dim], max_parts and sum_parts [parts]. Threads
// thread, thread + threads, ... (all of the block by default) stride over the head dims. A
// partition without keys has max -inf and sum 0 (weight 0); a row without any key gives zeros.
template <class T>
LW_DEVICE_INLINE void merge_partitions(const float* out_parts, const float* max_parts, const float* sum_parts,
                                       int parts, int head_dim, T* out, int thread = static_cast<int>(threadIdx.x),
                                       int threads = static_cast<int>(blockDim.x)) {
  // Unrolled so that each thread has several partitions' loads in flight (a split decode row
  // has up to tens of partitions; their loads, not the arithmetic, are the merge's cost).
  float m = -INFINITY;
#pragma unroll 8
  for (int p = 0; p < parts; ++p) m = fmaxf(m, max_parts[p]);
  const float ref = m == -INFINITY ? 0.0f : m;
  float total = 0.0f;
#pragma unroll 8
  for (int p = 0; p < parts; ++p) total += sum_parts[p] * exp2f(max_parts[p] - ref);
  for (int d = thread; d < head_dim; d += threads) {
    float acc = 0.0f;
#pragma unroll 8
    for (int p = 0; p < parts; ++p) acc += out_parts[p * head_dim + d] * sum_parts[p] * exp2f(max_parts[p] - ref);
    out[d] = gpu::from_float<T>(total > 0.0f ? acc / total : 0.0f);
  }
}

}  // namespace lw::kernels
