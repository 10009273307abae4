// OpenBLAS on the host target, where device memory is host memory. Half-precision operands are
// widened to fp32 for sgemm and the result rounded once, after the bias, like the GPU epilogues.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "gpu/numeric.h"
#include "ops/check.h"
#include "ops/vendor_gemm.h"

namespace lw::ops::detail {

namespace {

template <class T>
const float* as_float(const void* p, int64_t count, std::vector<float>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<const float*>(p);
  } else {
    buf.resize(static_cast<size_t>(count));
    const T* src = static_cast<const T*>(p);
    for (int64_t i = 0; i < count; ++i) buf[i] = gpu::to_float(src[i]);
    return buf.data();
  }
}

template <class T>
void run(const VendorGemm& g) {
  // Extent of one batch's operand in elements, for widening just what is read.
  const int64_t a_span = (g.m - 1) * g.lda + g.k;
  const int64_t b_span = g.b_kn ? (g.k - 1) * g.ldb + g.n : (g.n - 1) * g.ldb + g.k;
  // The thread's buffers, kept between calls: fresh ones of this size would be mapped and
  // page-faulted in again on every call (a tenth of an emulated SmolLM2 prefill, perf).
  thread_local std::vector<float> a_buf, b_buf, c_buf;
  c_buf.resize(static_cast<size_t>(g.m * g.n));
  for (int z = 0; z < g.batch; ++z) {
    const float* a = as_float<T>(static_cast<const T*>(g.a) + z * g.stride_a, a_span, a_buf);
    const float* b = as_float<T>(static_cast<const T*>(g.b) + z * g.stride_b, b_span, b_buf);
    if (g.batch_invariant) {
      // One sgemv per row: a row's sums then come from the same call whatever else is in the
      // batch. (Rows in padded groups of 16 for sgemm were not enough: OpenBLAS's Haswell sgemm
      // sums a row in an order that depends on its slot in the group.)
      for (int64_t i = 0; i < g.m; ++i) {
        if (g.b_kn)  // B [K, N]: c_i = B^T a_i
          cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(g.k), static_cast<int>(g.n), g.alpha, b,
                      static_cast<int>(g.ldb), a + i * g.lda, 1, 0.0f, c_buf.data() + i * g.n, 1);
        else  // B [N, K]: c_i = B a_i
          cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(g.n), static_cast<int>(g.k), g.alpha, b,
                      static_cast<int>(g.ldb), a + i * g.lda, 1, 0.0f, c_buf.data() + i * g.n, 1);
      }
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, g.b_kn ? CblasNoTrans : CblasTrans, static_cast<int>(g.m),
                  static_cast<int>(g.n), static_cast<int>(g.k), g.alpha, a, static_cast<int>(g.lda), b,
                  static_cast<int>(g.ldb), 0.0f, c_buf.data(), static_cast<int>(g.n));
    }
    T* c = static_cast<T*>(g.c) + z * g.stride_c;
    const T* bias = static_cast<const T*>(g.bias);
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j)
        c[i * g.ldc + j] = gpu::from_float<T>(c_buf[i * g.n + j] + (bias ? gpu::to_float(bias[j]) : 0.0f));
  }
}

}  // namespace

bool vendor_gemm(Context& ctx, const VendorGemm& g) {
  if (g.in == DType::i8) return false;  // OpenBLAS has no integer or FP8 GEMM
  if (g.m == 0 || g.n == 0 || g.batch == 0) return true;
  ctx.synchronize();  // kernels queued before must have written the operands
  dispatch_float(g.in, "gemm", [&]<class T>() { run<T>(g); });
  return true;
}

const char* vendor_gemm_name() { return "OpenBLAS"; }

}  // namespace lw::ops::detail
