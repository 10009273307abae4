// Device helpers of the grouped (mixture-of-experts) kernels: x's rows are grouped by expert,
// expert e holding rows [offsets[e], offsets[e + 1]) (kernels::moe_permutation's offsets).
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// The expert whose rows hold row r, for offsets that do not decrease and run from 0 past r: a
// binary search over the count + 1 offsets, read where they lie.
LW_DEVICE_INLINE int expert_of_row(const int32_t* offsets, int count, int64_t r) {
  int lo = 0, hi = count - 1;  // offsets[lo] <= r < offsets[hi + 1]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= r) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// The pass of up to `pass_rows` rows that begins at row r, where some expert's passes (from its
// first row on) begin there: its expert and its rows [r, end). False otherwise, and where the
// offsets do not run from 0 to `rows` (a block given row r then does nothing).
struct ExpertPass {
  int expert;
  int64_t end;
};
LW_DEVICE_INLINE bool pass_at_row(const int32_t* offsets, int count, int64_t rows, int64_t r, int pass_rows, ExpertPass& p) {
  if (offsets[0] != 0 || offsets[count] != rows || r >= rows) return false;
  p.expert = expert_of_row(offsets, count, r);
  const int64_t begin = offsets[p.expert], end = offsets[p.expert + 1] < rows ? offsets[p.expert + 1] : rows;
  if (r < begin || r >= end || (r - begin) % pass_rows != 0) return false;
  p.end = end - r < pass_rows ? end : r + pass_rows;
  return true;
}

}  // namespace lw::kernels
