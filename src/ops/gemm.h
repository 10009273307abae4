// GEMM and Linear on every target. Weights are stored as Hugging Face checkpoints do, [out, in];
// inputs are f32, f16 or bf16 with fp32 accumulation (int8 with int32 accumulation). The
// output is rounded once, after the bias, except by cuBLASLt's bias epilogue, which rounds
// the product to the output type before adding the bias (as torch's addmm does there).
#pragma once
#include "core/context.h"
#include "core/tensor.h"
#include "ops/select.h"

namespace lw::ops {

// Which implementation runs a GEMM. automatic: the vendor library, except that for a linear of
// at most kernels::kGemvMaxRows rows on a GPU the faster of the GEMV kernel and the vendor
// library, timed on first use of each shape, is taken, and grouped_linear's rule below.
// LW_GEMM_PATH=vendor|gemv|tiled forces one path where the caller passes automatic
// (ops/select.h); a path the op cannot take for its arguments (gemv beyond kGemvMaxRows rows of
// a linear, or in batched_matmul and linear_int8) is then an error.
enum class GemmPath { automatic, vendor, gemv, tiled };
// The vendor path is named by its library ("cuBLASLt", "hipBLASLt", "OpenBLAS"); the names
// LW_GEMM_PATH takes are those of GemmPaths::names.
const char* gemm_path_name(GemmPath path);

// What the automatic choice of a GEMM looks at.
enum class GemmOp { linear, batched_matmul, grouped_linear, linear_int8 };
struct GemmShape {
  GemmOp op = GemmOp::linear;
  int64_t m = 0, n = 0, k = 0;  // grouped_linear: m counts the tokens of all experts
  int64_t groups = 1;           // grouped_linear: the experts
  bool deterministic = false;   // Context::deterministic
};

// The GEMM paths for ops/select.h. Every path runs on every target: the vendor library
// (cuBLASLt, hipBLASLt, OpenBLAS), the GEMV kernel and the tiled GEMM. What a library lacks
// for one problem (OpenBLAS has no int8 GEMM) is reported per call by the vendor layer.
struct GemmPaths {
  using Path = GemmPath;
  using Shape = GemmShape;
  static constexpr const char* op = "GEMM";
  static constexpr const char* env = "LW_GEMM_PATH";
  static constexpr PathName<GemmPath> names[] = {
      {GemmPath::automatic, "automatic"}, {GemmPath::vendor, "vendor"}, {GemmPath::gemv, "gemv"}, {GemmPath::tiled, "tiled"}};
  static Availability available(const gpu::DeviceCaps& caps, GemmPath path);
  // The automatic rules: vendor, except grouped_linear (unless deterministic) at up to half a
  // row per expert on average, or up to eight for experts of fewer than 2^24 weights (the
  // grouped GEMV, no host synchronisation). Refined at run time by the ops:
  // an automatic vendor choice falls back to tiled where the library has no kernel for the
  // problem (int8 on the host; deterministic mode without a batch-invariant algorithm), and
  // a small linear races GEMV against the library (races_gemv).
  static GemmPath choose(const gpu::DeviceCaps& caps, const GemmShape& shape);
  // An automatic linear of at most kernels::kGemvMaxRows rows takes the faster of GEMV and the
  // vendor library, timed once per shape; not in deterministic mode (one implementation for
  // every M) and not on the emulator, where the GEMV kernel is interpreted while OpenBLAS runs
  // natively (the race is foregone, and timing it would slow every new shape).
  static bool races_gemv(const gpu::DeviceCaps& caps, const GemmShape& shape);
};

// out[..., N] = x[..., K] @ w[N, K]^T + bias[N]. x and out contiguous with the same leading
// dimensions; bias may be undefined. x, w, bias and out share one float dtype.
void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out,
            GemmPath path = GemmPath::automatic);

// out[z] = alpha * a[z] @ b[z]^T (b [Z, N, K], b_transposed true) or alpha * a[z] @ b[z]
// (b [Z, K, N]); a [Z, M, K], out [Z, M, N]; all contiguous, one float dtype.
void batched_matmul(Context& ctx, const Tensor& a, const Tensor& b, bool b_transposed, float alpha, const Tensor& out,
                    GemmPath path = GemmPath::automatic);

// Mixture-of-experts GEMM: x [T, K] holds the tokens of expert e in rows
// [offsets[e], offsets[e+1]) (offsets: device int32 [E + 1], offsets[0] = 0, offsets[E] = T);
// out[rows of e] = x[rows of e] @ w[e]^T with w [E, N, K]. Experts may receive no tokens.
// gemv (the GEMV kernel over each expert's rows, any number of them, a few at a time) and
// tiled run without any host synchronisation; vendor reads the offsets back once (one
// synchronisation per call, not per expert) and runs one vendor GEMM per non-empty expert.
// automatic takes gemv for few rows per expert (GemmPaths::choose), vendor above; tiled (whose
// 64-row tiles compute mostly padding at a few rows per expert) only where forced, for K = 0,
// and in deterministic mode for an expert the library has no batch-invariant algorithm for.
void grouped_linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& offsets, const Tensor& out,
                    GemmPath path = GemmPath::automatic);

// W8A8: out[m, n] = (sum_k xq[m, k] * wq[n, k]) * x_scale[m] * w_scale[n] + bias[n], exact int32
// accumulation. xq [M, K] and wq [N, K] int8, x_scale [M] and w_scale [N] f32, out [M, N] and
// bias (optional) f32/f16/bf16. vendor: cuBLASLt/hipBLASLt int8 GEMM and a scaling epilogue
// kernel (the host target has no vendor int8 GEMM: an error); automatic falls back to tiled
// where the vendor library has no kernel for the shape.
void linear_int8(Context& ctx, const Tensor& xq, const Tensor& x_scale, const Tensor& wq, const Tensor& w_scale,
                 const Tensor& bias, const Tensor& out, GemmPath path = GemmPath::automatic);

}  // namespace lw::ops
