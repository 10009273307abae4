// Portable tiled GEMM: the target-independent twin of the vendor libraries (cuBLASLt,
// hipBLASLt, OpenBLAS). Shared-memory tiles and plain loads, no tensor cores: correct on every
// target and every shape, used where no vendor kernel exists (int8 on the host, int8 with K not
// a multiple of 4, the grouped GEMM without a host synchronisation) and to test the vendor paths.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// C[m, n] = epilogue(sum_k A[m, k] * B[n, k]) for each batch (or group) z, with element
// strides: A(m, k) = a[z*a_batch + m*a_row + k*a_col], B(n, k) = b[z*b_batch + n*b_row + k*b_col],
// C(m, n) = c[z*c_batch + m*c_row + n]. Accumulates in Acc (float, or int32 for int8 inputs).
// Epilogue in float: alpha * acc * row_scale[m] * col_scale[n] + bias[n], each factor optional.
// Grouped form: with group_offsets (device int32 [batch + 1], non-decreasing), group z covers the
// rows [offsets[z], offsets[z+1]) of A and C (a_batch and c_batch are then ignored) and uses the
// z-th B; m is the total row count, an upper bound of every group's rows.
template <class TA, class TC>
struct TiledGemmArgs {
  const TA* a = nullptr;
  const TA* b = nullptr;
  TC* c = nullptr;
  const TC* bias = nullptr;
  const float* row_scale = nullptr;
  const float* col_scale = nullptr;
  const int32_t* group_offsets = nullptr;
  float alpha = 1.0f;
  int64_t m = 0, n = 0, k = 0;
  int64_t a_row = 0, a_col = 1, a_batch = 0;
  int64_t b_row = 0, b_col = 1, b_batch = 0;
  int64_t c_row = 0, c_batch = 0;
  int batch = 1;
};

template <class TA, class TC>
void tiled_gemm(const TiledGemmArgs<TA, TC>& args, cudaStream_t stream);

// out[m, n] = acc[m, n] * row_scale[m] * col_scale[n] + bias[n]: the epilogue of an int32 GEMM
// done by a vendor library; bias may be null.
template <class TC>
void scale_int32(TC* out, const int32_t* acc, const float* row_scale, const float* col_scale, const TC* bias,
                 int64_t m, int64_t n, cudaStream_t stream);

}  // namespace lw::kernels
