// The vendor GEMM of this build's target, behind one call: cuBLASLt (CUDA), hipBLASLt (HIP)
// or OpenBLAS (host). Internal to the ops layer; callers use ops/gemm.h.
#pragma once
#include <cstdint>

#include "core/context.h"
#include "core/dtype.h"

namespace lw::ops::detail {

// Row-major C[z] (m x n, row stride ldc) = alpha * A[z] (m x k, row stride lda) @ B[z]^T + bias,
// for z < batch, where B[z] is stored [n, k] (b_kn false) or [k, n] (b_kn true) with row stride
// ldb. in: f32, f16, bf16 (C and bias of the same type) or i8 (C i32, no bias, alpha 1).
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
};

// Runs g on ctx's stream. Returns false, having done nothing, when the library has no kernel
// for this problem (int8 on the host; an int8 shape cuBLASLt does not support); vendor
// failures throw lw::Error.
bool vendor_gemm(Context& ctx, const VendorGemm& g);
// "cuBLASLt", "hipBLASLt" or "OpenBLAS".
const char* vendor_gemm_name();

}  // namespace lw::ops::detail
