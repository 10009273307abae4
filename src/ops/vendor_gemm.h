// The vendor GEMM of this build's target, behind one call: cuBLASLt (CUDA), hipBLASLt (HIP)
// or OpenBLAS (host). Internal to the ops layer; callers use ops/gemm.h.
#pragma once
#include <cstdint>

#include "core/context.h"
#include "core/dtype.h"

namespace lw::ops::detail {

// Where the scales of an FP8 operand apply (VendorGemm::fp8).
enum class OperandScale {
  tensor,  // one f32
  outer,   // one f32 per row of the operand: [m] for a, [n] for b
  vec128,  // a only: one per 128 consecutive elements of a row, group-major [ceil(k / 128), m]
  blk128,  // b only: one per 128 x 128 block, row-major [ceil(n / 128), ceil(k / 128)]
};

// Row-major C[z] (m x n, row stride ldc) = alpha * A[z] (m x k, row stride lda) @ B[z]^T + bias,
// for z < batch, where B[z] is stored [n, k] (b_kn false) or [k, n] (b_kn true) with row stride
// ldb. in: f32, f16, bf16 (C and bias of the same type) or i8 (C i32, no bias, alpha 1); or
// FP8 (fp8 true, in i8): a and b hold e4m3fn codes, C and bias of dtype `out` (f16, bf16),
// each product term scaled by a's and b's scales (batch 1).
struct VendorGemm {
  DType in = DType::f32;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  bool b_kn = false;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  const void* bias = nullptr;
  float alpha = 1.0f;
  int batch = 1;
  // Each row of C summed in an order that does not depend on M (Context::deterministic); a
  // library that cannot promise it for this problem returns false (batch 1 only).
  bool batch_invariant = false;
  bool fp8 = false;
  DType out = DType::bf16;
  const float* a_scale = nullptr;
  OperandScale a_scale_layout = OperandScale::tensor;
  const float* b_scale = nullptr;
  OperandScale b_scale_layout = OperandScale::tensor;
};

// Runs g on ctx's stream. Returns false, having done nothing, when the library has no kernel
// for this problem (int8 and FP8 on the host, FP8 on HIP and before sm_89; a shape or scale
// layout the library does not support); vendor
// failures throw lw::Error.
bool vendor_gemm(Context& ctx, const VendorGemm& g);
// "cuBLASLt", "hipBLASLt" or "OpenBLAS".
const char* vendor_gemm_name();

}  // namespace lw::ops::detail
