#include "ops/gemm.h"

#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "core/stream.h"
#include "kernels/gemm_tiled.h"
#include "kernels/gemv.h"
#include "ops/check.h"
#include "ops/vendor_gemm.h"

namespace lw::ops {

namespace {

using detail::VendorGemm;

// Product of all dimensions but the last.
int64_t leading_rows(const Tensor& t) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  return rows;
}

void check_bias(const char* op, const Tensor& bias, const Tensor& out, int64_t n) {
  if (!bias.defined()) return;
  check_float_input(op, "bias", bias);
  check_same_dtype(op, "bias", bias, "out", out);
  LW_CHECK(bias.dim() == 1 && bias.size(0) == n, op << ": bias " << bias.describe() << " must be [" << n << "]");
}

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// The faster of the GEMV kernel and the vendor library for each small-M shape, timed once.
class SmallGemmChooser {
 public:
  explicit SmallGemmChooser(Context&) {}

  template <class Gemv, class Vendor>
  GemmPath choose(Context& ctx, DType dt, int64_t m, int64_t n, int64_t k, bool bias, Gemv&& gemv, Vendor&& vendor) {
    const auto key = std::make_tuple(static_cast<int>(dt), m, n, k, bias);
    auto it = chosen_.find(key);
    if (it != chosen_.end()) return it->second;
    const float gemv_ms = time(ctx, gemv);
    const float vendor_ms = time(ctx, vendor);
    const GemmPath best = gemv_ms <= vendor_ms ? GemmPath::gemv : GemmPath::vendor;
    chosen_.emplace(key, best);
    return best;
  }

 private:
  template <class F>
  static float time(Context& ctx, F&& run) {
    constexpr int kReps = 5;
    run();  // warm-up: first-use costs (the vendor heuristic, module loading) are not timed
    Event start, stop;
    start.record(ctx.stream());
    for (int i = 0; i < kReps; ++i) run();
    stop.record(ctx.stream());
    stop.synchronize();
    return stop.elapsed_ms_since(start);
  }

  std::map<std::tuple<int, int64_t, int64_t, int64_t, bool>, GemmPath> chosen_;
};

void require_vendor(bool ran, const char* op, int64_t m, int64_t n, int64_t k) {
  LW_CHECK(ran, op << ": " << detail::vendor_gemm_name() << " has no kernel for M=" << m << ", N=" << n << ", K=" << k
                   << "; use GemmPath::tiled or automatic");
}

// Experts of fewer weights than this (32 MiB in bf16) take the grouped GEMV up to 8 rows each.
constexpr int64_t kSmallExpertElements = int64_t{1} << 24;

}  // namespace

Availability GemmPaths::available(const gpu::DeviceCaps&, GemmPath) { return Availability::yes(); }

GemmPath GemmPaths::choose(const gpu::DeviceCaps&, const GemmShape& shape) {
  if (shape.op == GemmOp::grouped_linear && !shape.deterministic) {
    // The grouped GEMV reads an expert's weights at a high share of the memory rate for a row
    // or two and loses it with more, while a vendor call per expert costs ~8 us whatever its
    // size: small experts stay on the GEMV up to 8 rows each on average, large ones up to half
    // a row (H200, docs/PERFORMANCE.md "Dense MoE experts: the grouped GEMV").
    if (2 * shape.m <= shape.groups) return GemmPath::gemv;
    if (shape.m <= 8 * shape.groups && shape.n * shape.k < kSmallExpertElements) return GemmPath::gemv;
  }
  return GemmPath::vendor;
}

bool GemmPaths::races_gemv(const gpu::DeviceCaps& caps, const GemmShape& shape) {
  return shape.op == GemmOp::linear && !shape.deterministic && shape.m <= kernels::kGemvMaxRows && !caps.emulator();
}

const char* gemm_path_name(GemmPath path) {
  switch (path) {
    case GemmPath::automatic: return "automatic";
    case GemmPath::vendor: return detail::vendor_gemm_name();
    case GemmPath::gemv: return "gemv";
    case GemmPath::tiled: return "tiled";
  }
  return "?";
}

void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out, GemmPath path) {
  const char* op = "linear";
  check_float_input(op, "x", x);
  check_float_input(op, "w", w);
  check_float_input(op, "out", out);
  check_same_dtype(op, "x", x, "w", w);
  check_same_dtype(op, "x", x, "out", out);
  LW_CHECK(w.dim() == 2, op << ": w " << w.describe() << " must be [out_features, in_features]");
  const int64_t n = w.size(0), k = w.size(1);
  LW_CHECK(x.dim() >= 1 && x.size(-1) == k,
           op << ": x " << x.describe() << " must end in in_features " << k << " of w " << w.describe());
  std::vector<int64_t> want = x.shape();
  want.back() = n;
  LW_CHECK(out.shape() == want, op << ": out " << out.describe() << " must be " << shape_str(want));
  check_bias(op, bias, out, n);
  const int64_t m = leading_rows(x);
  const GemmShape shape{GemmOp::linear, m, n, k, 1, ctx.deterministic()};
  const Selection<GemmPath> sel = select<GemmPaths>(ctx.caps(), shape, path);
  if (m == 0 || n == 0) return;
  LW_CHECK(sel.path != GemmPath::gemv || m <= kernels::kGemvMaxRows,
           op << ": the gemv path takes at most " << kernels::kGemvMaxRows << " rows; x has " << m
              << origin_note<GemmPaths>(sel));

  dispatch_float(x.dtype(), op, [&]<class T>() {
    T* y = out.data<T>();
    const T* b = data_or_null<T>(bias);
    auto run_gemv = [&] { kernels::gemv<T>(y, x.data<T>(), w.data<T>(), b, static_cast<int>(m), n, k, k, n, ctx.warp_size(), ctx.stream().get()); };
    VendorGemm g;
    g.in = x.dtype();
    g.m = m, g.n = n, g.k = k;
    g.a = x.data_ptr(), g.lda = k;
    g.b = w.data_ptr(), g.ldb = k;
    g.c = y, g.ldc = n;
    g.bias = b;
    g.batch_invariant = ctx.deterministic();
    auto run_vendor = [&] { require_vendor(detail::vendor_gemm(ctx, g), op, m, n, k); };
    auto run_tiled = [&] {
      kernels::TiledGemmArgs<T, T> p;
      p.a = x.data<T>(), p.b = w.data<T>(), p.c = y, p.bias = b;
      p.m = m, p.n = n, p.k = k;
      p.a_row = k, p.b_row = k, p.c_row = n;
      kernels::tiled_gemm(p, ctx.stream().get());
    };
    // An empty sum is only the bias, whatever the path: no library takes K = 0.
    GemmPath use = k == 0 ? GemmPath::tiled : sel.path;
    if (!sel.forced() && use == GemmPath::vendor && ctx.deterministic()) {
      // One implementation for every M: the vendor library's pinned algorithm for this shape,
      // or the tiled GEMM where the library has none (both sum each row in a fixed order).
      if (!detail::vendor_gemm(ctx, g)) run_tiled();
      return;
    }
    if (!sel.forced() && use == GemmPath::vendor && GemmPaths::races_gemv(ctx.caps(), shape))
      use = ctx.resource<SmallGemmChooser>().choose(ctx, x.dtype(), m, n, k, b != nullptr, run_gemv, run_vendor);
    switch (use) {
      case GemmPath::gemv: run_gemv(); break;
      case GemmPath::tiled: run_tiled(); break;
      default: run_vendor(); break;
    }
  });
}

void batched_matmul(Context& ctx, const Tensor& a, const Tensor& b, bool b_transposed, float alpha, const Tensor& out,
                    GemmPath path) {
  const char* op = "batched_matmul";
  check_float_input(op, "a", a);
  check_float_input(op, "b", b);
  check_float_input(op, "out", out);
  check_same_dtype(op, "a", a, "b", b);
  check_same_dtype(op, "a", a, "out", out);
  LW_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3,
           op << ": a " << a.describe() << ", b " << b.describe() << " and out " << out.describe() << " must be 3-D");
  const int64_t z = a.size(0), m = a.size(1), k = a.size(2);
  const int64_t n = b_transposed ? b.size(1) : b.size(2);
  LW_CHECK(b.size(0) == z && (b_transposed ? b.size(2) : b.size(1)) == k,
           op << ": b " << b.describe() << " must be " << (b_transposed ? "[Z, N, K]" : "[Z, K, N]") << " for a "
              << a.describe());
  LW_CHECK(out.shape() == std::vector<int64_t>({z, m, n}),
           op << ": out " << out.describe() << " must be " << shape_str({z, m, n}));
  const Selection<GemmPath> sel =
      select<GemmPaths>(ctx.caps(), GemmShape{GemmOp::batched_matmul, m, n, k, z, ctx.deterministic()}, path);
  LW_CHECK(sel.path != GemmPath::gemv,
           op << ": the gemv path is for linear and grouped_linear only" << origin_note<GemmPaths>(sel));
  LW_CHECK(z <= 65535, op << ": " << z << " batches; at most 65535");
  LW_CHECK(std::isfinite(alpha), op << ": alpha " << alpha << " must be finite");
  if (z == 0 || m == 0 || n == 0) return;
  dispatch_float(a.dtype(), op, [&]<class T>() {
    if (sel.path == GemmPath::tiled || k == 0) {
      kernels::TiledGemmArgs<T, T> p;
      p.a = a.data<T>(), p.b = b.data<T>(), p.c = out.data<T>();
      p.alpha = alpha;
      p.m = m, p.n = n, p.k = k;
      p.a_row = k, p.a_batch = m * k;
      p.b_row = b_transposed ? k : 1, p.b_col = b_transposed ? 1 : n, p.b_batch = n * k;
      p.c_row = n, p.c_batch = m * n;
      p.batch = static_cast<int>(z);
      kernels::tiled_gemm(p, ctx.stream().get());
      return;
    }
    VendorGemm g;
    g.in = a.dtype();
    g.m = m, g.n = n, g.k = k;
    g.a = a.data_ptr(), g.lda = k, g.stride_a = m * k;
    g.b = b.data_ptr(), g.ldb = b_transposed ? k : n, g.stride_b = n * k, g.b_kn = !b_transposed;
    g.c = out.data_ptr(), g.ldc = n, g.stride_c = m * n;
    g.alpha = alpha;
    g.batch = static_cast<int>(z);
    require_vendor(detail::vendor_gemm(ctx, g), op, m, n, k);
  });
}

void grouped_linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& offsets, const Tensor& out,
                    GemmPath path) {
  const char* op = "grouped_linear";
  check_float_input(op, "x", x);
  check_float_input(op, "w", w);
  check_float_input(op, "out", out);
  check_same_dtype(op, "x", x, "w", w);
  check_same_dtype(op, "x", x, "out", out);
  check_on_device(op, "offsets", offsets);
  LW_CHECK(x.dim() == 2 && w.dim() == 3, op << ": x " << x.describe() << " must be [T, K] and w " << w.describe()
                                             << " [E, N, K]");
  const int64_t t = x.size(0), k = x.size(1), e = w.size(0), n = w.size(1);
  LW_CHECK(w.size(2) == k, op << ": w " << w.describe() << " must end in K = " << k << " of x " << x.describe());
  LW_CHECK(offsets.dtype() == DType::i32 && offsets.dim() == 1 && offsets.size(0) == e + 1 && offsets.is_contiguous(),
           op << ": offsets " << offsets.describe() << " must be contiguous i32 [" << e + 1 << "]");
  LW_CHECK(out.shape() == std::vector<int64_t>({t, n}), op << ": out " << out.describe() << " must be " << shape_str({t, n}));
  const Selection<GemmPath> sel =
      select<GemmPaths>(ctx.caps(), GemmShape{GemmOp::grouped_linear, t, n, k, e, ctx.deterministic()}, path);
  LW_CHECK(e <= 65535, op << ": " << e << " experts; at most 65535");
  if (t == 0 || n == 0 || e == 0) return;
  // Deterministic: the vendor library's batch-invariant algorithm per expert (one offsets read
  // back per call), or tiled where it has none; never a choice by the number of tokens.
  const bool invariant = ctx.deterministic() && !sel.forced();
  const GemmPath use = k == 0 ? GemmPath::tiled : sel.path;
  dispatch_float(x.dtype(), op, [&]<class T>() {
    if (use == GemmPath::gemv) {
      // Rows per pass: the mean per expert, so that a typical expert takes one pass.
      const int64_t mean = (t + e - 1) / e;
      kernels::grouped_gemv<T>(out.data<T>(), x.data<T>(), w.data<T>(), offsets.data<int32_t>(), static_cast<int>(e),
                               static_cast<int>(std::min<int64_t>(mean, kernels::kGemvMaxRows)), n, k, ctx.warp_size(),
                               ctx.stream().get());
      return;
    }
    if (use == GemmPath::tiled) {
      kernels::TiledGemmArgs<T, T> p;
      p.a = x.data<T>(), p.b = w.data<T>(), p.c = out.data<T>();
      p.group_offsets = offsets.data<int32_t>();
      p.m = t, p.n = n, p.k = k;
      p.a_row = k, p.b_row = k, p.b_batch = n * k, p.c_row = n;
      p.batch = static_cast<int>(e);
      kernels::tiled_gemm(p, ctx.stream().get());
      return;
    }
    const Tensor host_offsets = ctx.to_host(offsets);
    const int32_t* off = host_offsets.data<int32_t>();
    LW_CHECK(off[0] == 0 && off[e] == t, op << ": offsets must run from 0 to T = " << t << "; got " << off[0] << " .. " << off[e]);
    for (int64_t i = 0; i < e; ++i) {
      LW_CHECK(off[i] <= off[i + 1], op << ": offsets decrease at expert " << i << " (" << off[i] << " > " << off[i + 1] << ")");
      const int64_t rows = off[i + 1] - off[i];
      if (rows == 0) continue;
      VendorGemm g;
      g.in = x.dtype();
      g.m = rows, g.n = n, g.k = k;
      g.a = x.data<T>() + off[i] * k, g.lda = k;
      g.b = w.data<T>() + i * n * k, g.ldb = k;
      g.c = out.data<T>() + off[i] * n, g.ldc = n;
      g.batch_invariant = ctx.deterministic();
      if (detail::vendor_gemm(ctx, g)) continue;
      LW_CHECK(invariant, op << ": " << detail::vendor_gemm_name() << " has no kernel for M=" << rows << ", N=" << n
                             << ", K=" << k << "; use GemmPath::tiled or automatic");
      kernels::TiledGemmArgs<T, T> p;
      p.a = x.data<T>() + off[i] * k, p.b = w.data<T>() + i * n * k, p.c = out.data<T>() + off[i] * n;
      p.m = rows, p.n = n, p.k = k;
      p.a_row = k, p.b_row = k, p.c_row = n;
      kernels::tiled_gemm(p, ctx.stream().get());
    }
  });
}

void linear_int8(Context& ctx, const Tensor& xq, const Tensor& x_scale, const Tensor& wq, const Tensor& w_scale,
                 const Tensor& bias, const Tensor& out, GemmPath path) {
  const char* op = "linear_int8";
  for (const auto& [name, t] : {std::pair{"xq", &xq}, {"wq", &wq}}) {
    check_on_device(op, name, *t);
    LW_CHECK(t->dtype() == DType::i8 && t->dim() == 2 && t->is_contiguous(),
             op << ": " << name << " " << t->describe() << " must be contiguous 2-D i8");
  }
  const int64_t m = xq.size(0), k = xq.size(1), n = wq.size(0);
  LW_CHECK(wq.size(1) == k, op << ": wq " << wq.describe() << " must be [N, " << k << "] to match xq " << xq.describe());
  for (const auto& [name, t, len] : {std::tuple{"x_scale", &x_scale, m}, {"w_scale", &w_scale, n}}) {
    check_on_device(op, name, *t);
    LW_CHECK(t->dtype() == DType::f32 && t->dim() == 1 && t->size(0) == len && t->is_contiguous(),
             op << ": " << name << " " << t->describe() << " must be contiguous f32 [" << len << "]");
  }
  check_float_input(op, "out", out);
  LW_CHECK(out.shape() == std::vector<int64_t>({m, n}), op << ": out " << out.describe() << " must be " << shape_str({m, n}));
  check_bias(op, bias, out, n);
  const Selection<GemmPath> sel =
      select<GemmPaths>(ctx.caps(), GemmShape{GemmOp::linear_int8, m, n, k, 1, ctx.deterministic()}, path);
  LW_CHECK(sel.path != GemmPath::gemv,
           op << ": the gemv path is for floating-point linear only" << origin_note<GemmPaths>(sel));
  if (m == 0 || n == 0) return;
  dispatch_float(out.dtype(), op, [&]<class TC>() {
    const TC* b = data_or_null<TC>(bias);
    if (sel.path != GemmPath::tiled && k > 0) {
      Tensor acc = ctx.empty({m, n}, DType::i32);
      VendorGemm g;
      g.in = DType::i8;
      g.m = m, g.n = n, g.k = k;
      g.a = xq.data_ptr(), g.lda = k;
      g.b = wq.data_ptr(), g.ldb = k;
      g.c = acc.data_ptr(), g.ldc = n;
      if (detail::vendor_gemm(ctx, g)) {
        kernels::scale_int32<TC>(out.data<TC>(), acc.data<int32_t>(), x_scale.data<float>(), w_scale.data<float>(), b, m, n,
                                 ctx.stream().get());
        return;
      }
      if (sel.forced()) require_vendor(false, op, m, n, k);  // only the automatic choice falls back
    }
    kernels::TiledGemmArgs<int8_t, TC> p;
    p.a = xq.data<int8_t>(), p.b = wq.data<int8_t>(), p.c = out.data<TC>(), p.bias = b;
    p.row_scale = x_scale.data<float>(), p.col_scale = w_scale.data<float>();
    p.m = m, p.n = n, p.k = k;
    p.a_row = k, p.b_row = k, p.c_row = n;
    kernels::tiled_gemm(p, ctx.stream().get());
  });
}

}  // namespace lw::ops
