// Strided copy with type conversion: the one kernel behind contiguous(), transposes, concat
// (copies into slices) and splitting fused tensors.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

inline constexpr int kMaxCopyRank = 6;

struct CopyLayout {
  int rank;
  int64_t shape[kMaxCopyRank];
  int64_t src_stride[kMaxCopyRank];  // in elements
  int64_t dst_stride[kMaxCopyRank];
};

// dst[index] = convert(src[index]) for every index of the shape.
template <class TDst, class TSrc>
void strided_copy(const CopyLayout& layout, const TSrc* src, TDst* dst, int64_t numel, int warp_size,
                  cudaStream_t stream);

// Rows of 16-byte pieces: dst row r = src row r, for `rows` rows of `pieces` pieces each; row
// strides in pieces. Both pointers 16-byte aligned.
void copy_rows(const void* src, void* dst, int64_t rows, int64_t pieces, int64_t src_stride, int64_t dst_stride,
               int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
