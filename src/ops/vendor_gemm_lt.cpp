// cuBLASLt on CUDA and hipBLASLt on HIP (through the cublasLt.h forwarding header). The row-major
// problem C = A @ B^T is the column-major C^T = op(B) @ A^T the libraries compute natively.
#include <cublasLt.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/logging.h"
#include "ops/vendor_gemm.h"

// cuBLASLt's FP8 scale modes (outer vectors, 1 x 128 and 128 x 128 blocks) came with CUDA 12.9;
// hipBLASLt's FP8 (gfx942's e4m3fnuz) is not wired.
#if !defined(LW_TARGET_HIP) && CUBLAS_VERSION >= 120900
#define LW_BLASLT_FP8 1
#else
#define LW_BLASLT_FP8 0
#endif

#define LW_BLASLT_CHECK(call)                                                                                 \
  do {                                                                                                        \
    const cublasStatus_t lw_status_ = (call);                                                                 \
    if (lw_status_ != CUBLAS_STATUS_SUCCESS)                                                                  \
      ::lw::detail::throw_vendor_error(__FILE__, __LINE__, #call, ::lw::ops::detail::vendor_gemm_name(),      \
                                       cublasLtGetStatusName(lw_status_), cublasLtGetStatusString(lw_status_)); \
  } while (0)

namespace lw::ops::detail {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cudaDataType data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::i8: return CUDA_R_8I;
    case DType::i32: return CUDA_R_32I;
    default: LW_FAIL(vendor_gemm_name() << ": no GEMM for dtype " << dtype_name(t));
  }
}

// Largest power of two (<= 256) dividing the address: what the library may assume.
uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

template <class T, void (*Destroy)(T)>
struct Owned {
  T h = nullptr;
  ~Owned() {
    if (h) Destroy(h);
  }
};
void destroy_desc(cublasLtMatmulDesc_t d) { cublasLtMatmulDescDestroy(d); }
void destroy_layout(cublasLtMatrixLayout_t l) { cublasLtMatrixLayoutDestroy(l); }
void destroy_pref(cublasLtMatmulPreference_t p) { cublasLtMatmulPreferenceDestroy(p); }

// (dtype, m, n, k, lda, ldb, ldc, strides, b_kn, bias, batch, alignment, alpha, batch-invariant,
// fp8 form: fp8_form())
using ProblemKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                              bool, bool, int, uint32_t, float, bool, int>;

// 0 for a GEMM that is not FP8; else the output dtype and both scale layouts, packed.
int fp8_form(const VendorGemm& g) {
  if (!g.fp8) return 0;
  return 1 + static_cast<int>(g.out) * 64 + static_cast<int>(g.a_scale_layout) * 8 + static_cast<int>(g.b_scale_layout);
}

#if LW_BLASLT_FP8
cublasLtMatmulMatrixScale_t scale_mode(OperandScale s) {
  switch (s) {
    case OperandScale::tensor: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case OperandScale::outer: return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case OperandScale::vec128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case OperandScale::blk128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}
#endif

// Everything a problem shape needs, made once: the descriptors and the heuristic's algorithm
// (creating descriptors on every call costs more host time than a small GEMM takes on the GPU).
struct Plan {
  Owned<cublasLtMatmulDesc_t, destroy_desc> desc;
  Owned<cublasLtMatrixLayout_t, destroy_layout> la, lb, lc;
  cublasLtMatmulHeuristicResult_t heuristic{};
  bool found = false;
};

// The algorithm of a batch-invariant problem class (every dimension but M): one algorithm for
// every M, without split-K reductions, so that each row of C is summed in the same order
// whatever M is. usable false: no candidate ran at every M checked; the caller takes the
// portable tiled GEMM for the whole class instead.
struct Pin {
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;
};

// M of the heuristic query that picks a class's algorithm (LW_DETERMINISTIC_GEMM_ROWS overrides
// it, for tuning), and the M values every candidate must pass cublasLtMatmulAlgoCheck at (decode
// batches up to prefill chunks).
constexpr int64_t kPinRows = 128;
int64_t pin_rows() {
  static const int64_t rows = [] {
    const char* v = std::getenv("LW_DETERMINISTIC_GEMM_ROWS");
    const long long r = v ? std::atoll(v) : 0;
    return r > 0 ? static_cast<int64_t>(r) : kPinRows;
  }();
  return rows;
}
constexpr int64_t kPinCheckRows[] = {1, 2, 3, 8, 17, 64, 128, 255, 1024, 4096};

// Per-context handle, workspace and the plans of the problems seen.
class BlasLt {
 public:
  explicit BlasLt(Context& ctx) : workspace_(ctx.empty({static_cast<int64_t>(kWorkspaceBytes)}, DType::i8)) {
    LW_BLASLT_CHECK(cublasLtCreate(&handle_));
  }
  ~BlasLt() {
    plans_.clear();
    cublasLtDestroy(handle_);
  }

  bool run(Context& ctx, const VendorGemm& g) {
    if (g.fp8) {
#if LW_BLASLT_FP8
      if (g.batch != 1 || g.batch_invariant || ctx.caps().arch_number < 89) return false;
#else
      return false;
#endif
    }
    const bool int8 = g.in == DType::i8 && !g.fp8;
    uint32_t align = std::min({alignment_of(g.a), alignment_of(g.b), alignment_of(g.c),
                               g.bias ? alignment_of(g.bias) : 256u});
    const bool invariant = g.batch_invariant && g.batch == 1;
    if (invariant) {
      // One algorithm per shape whatever the pointers: chosen for 16-byte alignment, which every
      // row of operands with 16-byte rows has; other shapes take the tiled GEMM.
      const size_t in_bytes = dtype_size(g.in), out_bytes = int8 ? 4 : in_bytes;
      if ((g.lda * in_bytes) % 16 != 0 || (g.ldb * in_bytes) % 16 != 0 || (g.ldc * out_bytes) % 16 != 0) return false;
      LW_CHECK(align >= 16, vendor_gemm_name() << ": a batch-invariant GEMM needs 16-byte aligned operands; got " << align
                                               << "-byte alignment");
      align = 16;
    }
    const ProblemKey key{static_cast<int>(g.in), g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.stride_a, g.stride_b, g.stride_c,
                         g.b_kn, g.bias != nullptr, g.batch, align, g.alpha, invariant, fp8_form(g)};
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, invariant ? pinned_plan(g, align) : make_plan(g, align)).first;
    Plan& p = *it->second;
    if (!p.found) return false;
    if (g.bias)
      LW_BLASLT_CHECK(cublasLtMatmulDescSetAttribute(p.desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
#if LW_BLASLT_FP8
    if (g.fp8) {  // library A is b, library B is a
      LW_BLASLT_CHECK(
          cublasLtMatmulDescSetAttribute(p.desc.h, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.b_scale, sizeof(g.b_scale)));
      LW_BLASLT_CHECK(
          cublasLtMatmulDescSetAttribute(p.desc.h, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.a_scale, sizeof(g.a_scale)));
    }
#endif
    const float alpha_f = g.alpha, beta_f = 0.0f;
    const int32_t alpha_i = 1, beta_i = 0;
    const void* alpha = int8 ? static_cast<const void*>(&alpha_i) : &alpha_f;
    const void* beta = int8 ? static_cast<const void*>(&beta_i) : &beta_f;
    LW_BLASLT_CHECK(cublasLtMatmul(handle_, p.desc.h, alpha, g.b, p.la.h, g.a, p.lb.h, beta, g.c, p.lc.h, g.c, p.lc.h,
                                   &p.heuristic.algo, workspace_.data_ptr(), kWorkspaceBytes, ctx.stream().get()));
    return true;
  }

 private:
  // The descriptors of g's problem with M = m, and the preference of its heuristic query.
  std::unique_ptr<Plan> describe(const VendorGemm& g, int64_t m) {
    auto p = std::make_unique<Plan>();
    const bool int8 = g.in == DType::i8 && !g.fp8;
    const DType out = int8 ? DType::i32 : g.fp8 ? g.out : g.in;
#if LW_BLASLT_FP8
    const cudaDataType io = g.fp8 ? CUDA_R_8F_E4M3 : data_type(g.in), ct = data_type(out);
#else
    const cudaDataType io = data_type(g.in), ct = data_type(out);
#endif
    const cublasComputeType_t compute = int8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F;
    const cudaDataType scale = int8 ? CUDA_R_32I : CUDA_R_32F;
    LW_BLASLT_CHECK(cublasLtMatmulDescCreate(&p->desc.h, compute, scale));
    const cublasOperation_t op_b = g.b_kn ? CUBLAS_OP_N : CUBLAS_OP_T, op_a = CUBLAS_OP_N;
    LW_BLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)));
    LW_BLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a)));
#if LW_BLASLT_FP8
    if (g.fp8) {
      const int32_t lib_a = scale_mode(g.b_scale_layout), lib_b = scale_mode(g.a_scale_layout);
      LW_BLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &lib_a, sizeof(lib_a)));
      LW_BLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &lib_b, sizeof(lib_b)));
      // Fast accumulation (the tensor cores' own precision between promotions) for per-tensor
      // and per-row scales, the usual choice for FP8 inference; the library has no such kernels
      // for block scales.
      const int8_t fast = g.a_scale_layout != OperandScale::vec128 && g.b_scale_layout != OperandScale::blk128;
      LW_BLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
      // The heuristic refuses vector and block scale modes without their pointers (status 7).
      LW_BLASLT_CHECK(
          cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.b_scale, sizeof(g.b_scale)));
      LW_BLASLT_CHECK(
          cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.a_scale, sizeof(g.a_scale)));
    }
#endif
    if (g.bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      LW_BLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      LW_BLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
      const int32_t bias_type = static_cast<int32_t>(ct);
      LW_BLASLT_CHECK(
          cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    }
    // Library "A" is B (n x k after op), library "B" is A^T (k x m), library "C" is C^T (n x m).
    if (g.b_kn) LW_BLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->la.h, io, g.n, g.k, g.ldb));
    else LW_BLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->la.h, io, g.k, g.n, g.ldb));
    LW_BLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->lb.h, io, g.k, m, g.lda));
    LW_BLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->lc.h, ct, g.n, m, g.ldc));
    if (g.batch > 1) {
      const int32_t count = g.batch;
      const std::tuple<cublasLtMatrixLayout_t, int64_t> strides[] = {
          {p->la.h, g.stride_b}, {p->lb.h, g.stride_a}, {p->lc.h, g.stride_c}};
      for (const auto& [layout, stride] : strides) {
        LW_BLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        LW_BLASLT_CHECK(
            cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
      }
    }
    return p;
  }

  // Up to `count` algorithms the heuristic offers for p's problem; split-K reductions refused
  // when `no_reduction`.
  std::vector<cublasLtMatmulHeuristicResult_t> heuristic(const Plan& p, uint32_t align, int count, bool no_reduction) {
    Owned<cublasLtMatmulPreference_t, destroy_pref> pref;
    LW_BLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref.h));
    const uint64_t ws = kWorkspaceBytes;
    LW_BLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
#if !defined(LW_TARGET_HIP)
    // cuBLASLt assumes 256-byte aligned operands unless told otherwise; hipBLASLt has no such preference.
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      LW_BLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, attr, &align, sizeof(align)));
    if (no_reduction) {
      const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
      LW_BLASLT_CHECK(
          cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &none, sizeof(none)));
    }
#else
    (void)align;
    (void)no_reduction;
#endif
    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc.h, p.la.h, p.lb.h, p.lc.h, p.lc.h, pref.h, count,
                                                             results.data(), &found);
    if (st != CUBLAS_STATUS_SUCCESS) found = 0;
    if (found == 0)
      lw::log().debug("{}: no algorithm for this problem (status {})", vendor_gemm_name(), static_cast<int>(st));
    results.resize(static_cast<size_t>(found));
    return results;
  }

  std::unique_ptr<Plan> make_plan(const VendorGemm& g, uint32_t align) {
    auto p = describe(g, g.m);
    const auto found = heuristic(*p, align, 1, false);
    p->found = !found.empty();
    if (p->found) p->heuristic = found[0];
    return p;
  }

  // Whether `algo` runs g's problem at M = m within the workspace.
  bool runs_at(const VendorGemm& g, int64_t m, const cublasLtMatmulAlgo_t& algo) {
#if defined(LW_TARGET_HIP)
    (void)g, (void)m, (void)algo;
    return false;
#else
    const auto p = describe(g, m);
    cublasLtMatmulHeuristicResult_t check{};
    return cublasLtMatmulAlgoCheck(handle_, p->desc.h, p->la.h, p->lb.h, p->lc.h, p->lc.h, &algo, &check) ==
               CUBLAS_STATUS_SUCCESS &&
           check.workspaceSize <= kWorkspaceBytes;
#endif
  }

  // A batch-invariant plan: the class's pinned algorithm on g's M. hipBLASLt offers no way to
  // check an algorithm at another M nor to refuse its split-K (GSU, stream-K) solutions, so on
  // HIP no class is pinned and the tiled GEMM runs instead.
  std::unique_ptr<Plan> pinned_plan(const VendorGemm& g, uint32_t align) {
    const ProblemKey class_key{static_cast<int>(g.in), 0, g.n, g.k, g.lda, g.ldb, g.ldc, 0, 0, 0, g.b_kn, g.bias != nullptr,
                               g.batch, align, g.alpha, true, fp8_form(g)};
    auto it = pins_.find(class_key);
    if (it == pins_.end()) {
      Pin pin;
      const auto reference = describe(g, pin_rows());
      for (const auto& candidate : heuristic(*reference, align, 8, true)) {
        bool all = true;
        for (int64_t m : kPinCheckRows) all = all && runs_at(g, m, candidate.algo);
        if (all) {
          pin.algo = candidate.algo;
          pin.usable = true;
          break;
        }
      }
      if (!pin.usable)
        lw::log().info("{}: no batch-invariant algorithm for N={}, K={}; the tiled GEMM runs that shape",
                       vendor_gemm_name(), g.n, g.k);
      it = pins_.emplace(class_key, pin).first;
    }
    auto p = describe(g, g.m);
    if (!it->second.usable) return p;  // found false: the tiled GEMM
    LW_CHECK(runs_at(g, g.m, it->second.algo), vendor_gemm_name() << ": the batch-invariant algorithm of N=" << g.n << ", K="
                                                                  << g.k << " does not run at M=" << g.m);
    p->heuristic.algo = it->second.algo;
    p->found = true;
    return p;
  }

  cublasLtHandle_t handle_ = nullptr;
  Tensor workspace_;
  std::map<ProblemKey, std::unique_ptr<Plan>> plans_;
  std::map<ProblemKey, Pin> pins_;
};

}  // namespace

bool vendor_gemm(Context& ctx, const VendorGemm& g) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return true;
  return ctx.resource<BlasLt>().run(ctx, g);
}

const char* vendor_gemm_name() {
#if defined(LW_TARGET_HIP)
  return "hipBLASLt";
#else
  return "cuBLASLt";
#endif
}

}  // namespace lw::ops::detail
