// GEMM, Linear, batched, grouped and int8 GEMM on every path of this target, against float64
// (and exact integer) references.
#include <cmath>
#include <cstring>

#include "kernels/gemv.h"
#include "ops/gemm.h"
#include "test_util.h"

namespace lw::test {
namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
#if defined(LW_TARGET_HOST)
constexpr bool kVendorRoundsBeforeBias = false;  // the OpenBLAS path adds the bias in fp32
#else
constexpr bool kVendorRoundsBeforeBias = true;
#endif

// The paths a float linear of m rows can take on this device: every path the selection helper
// reports available (gemv up to its row limit), and automatic where it may differ from vendor
// (on the emulator it is the vendor path: not run twice).
std::vector<ops::GemmPath> float_paths(int64_t m) {
  std::vector<ops::GemmPath> p;
  if (!ctx().caps().emulator()) p.push_back(ops::GemmPath::automatic);
  for (ops::GemmPath path : ops::available_paths<ops::GemmPaths>(ctx().caps()))
    if (path != ops::GemmPath::gemv || m <= kernels::kGemvMaxRows) p.push_back(path);
  return p;
}

// The paths of the GEMMs other than linear: every available one but gemv (linear only).
std::vector<ops::GemmPath> matmul_paths(bool with_automatic) {
  std::vector<ops::GemmPath> p;
  if (with_automatic) p.push_back(ops::GemmPath::automatic);
  for (ops::GemmPath path : ops::available_paths<ops::GemmPaths>(ctx().caps()))
    if (path != ops::GemmPath::gemv) p.push_back(path);
  return p;
}

struct Reference {
  std::vector<double> value, magnitude, product;  // result; sum |a||b| (+ |bias|); result less the bias
};

// |got - ref| <= eps(dt) * |ref| (the output rounding) + 4e-6 * sum |a||b| (fp32 accumulation;
// 4e-6 is ~64 fp32 unit round-offs, below any real error and far above reordering noise).
// cuBLASLt's bias epilogue rounds the product to the output type before adding the bias, so
// where there is a bias a second rounding, of the product, is allowed: eps(dt) * |product|.
::testing::AssertionResult gemm_close(const Tensor& got, const Reference& r, bool bias_rounding = false) {
  const std::vector<double>& ref = r.value;
  const std::vector<double> g = to_doubles(got);
  const double eps = epsilon(got.dtype());
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = eps * (std::abs(ref[i]) + (bias_rounding ? std::abs(r.product[i]) : 0.0)) + 4e-6 * r.magnitude[i];
    if (!(std::abs(g[i] - ref[i]) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want " << ref[i] << " (tol " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

// C[z][i][j] = alpha * sum_k A[z][i][k] * B(z, j, k) + bias[j].
Reference reference(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>* bias, int64_t z,
                    int64_t m, int64_t n, int64_t k, bool b_nk, double alpha = 1.0) {
  Reference r;
  r.value.resize(static_cast<size_t>(z * m * n));
  r.magnitude.resize(r.value.size());
  r.product.resize(r.value.size());
  for (int64_t q = 0; q < z; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int64_t l = 0; l < k; ++l) {
          const double bv = b_nk ? b[(q * n + j) * k + l] : b[(q * k + l) * n + j];
          s += a[(q * m + i) * k + l] * bv;
          mag += std::abs(a[(q * m + i) * k + l] * bv);
        }
        const size_t o = static_cast<size_t>((q * m + i) * n + j);
        r.product[o] = alpha * s;
        r.value[o] = alpha * s + (bias ? (*bias)[j] : 0.0);
        r.magnitude[o] = std::abs(alpha) * mag + (bias ? std::abs((*bias)[j]) : 0.0);
      }
  return r;
}

TEST(Gemm, LinearMatchesFloat64OnEveryPath) {
  const int64_t shapes[][3] = {{1, 1, 1},   {1, 33, 7},    {3, 130, 100}, {16, 64, 257}, {17, 70, 96},
                               {5, 257, 64}, {70, 9, 300}, {2, 1500, 24}, {1, 5, 0}};
  // Each (dtype, shape) with or without a bias, alternating along both (9 shapes: the pattern
  // shifts from one dtype to the next), so that every dtype and every shape meets both
  // epilogues; the emulator, under AddressSanitizer most of all, is slow.
  int case_index = 0;
  for (DType dt : kFloatTypes) {
    for (const auto& s : shapes) {
      const bool with_bias = case_index++ % 2 == 1;
      const int64_t m = s[0], n = s[1], k = s[2];
      Tensor xh = random_host({m, k}, dt), wh = random_host({n, k}, dt), bh = random_host({n}, dt);
      Tensor x = ctx().to_device(xh), w = ctx().to_device(wh), b = ctx().to_device(bh), out = ctx().empty({m, n}, dt);
      const std::vector<double> bias = to_doubles(bh);
      const Reference ref = reference(to_doubles(xh), to_doubles(wh), with_bias ? &bias : nullptr, 1, m, n, k, true);
      for (ops::GemmPath path : float_paths(m)) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " M=" << m << " N=" << n << " K=" << k
                                          << (with_bias ? " bias " : " ") << ops::gemm_path_name(path));
        poison(out);
        ops::linear(ctx(), x, w, with_bias ? b : Tensor(), out, path);
        const Tensor first = ctx().to_host(out);
        EXPECT_TRUE(gemm_close(first, ref, with_bias && kVendorRoundsBeforeBias &&
                                               (path == ops::GemmPath::vendor || path == ops::GemmPath::automatic)));
        if (dt == DType::bf16) {  // reruns are bit-identical (one dtype: the emulator is slow)
          ops::linear(ctx(), x, w, with_bias ? b : Tensor(), out, path);
          EXPECT_TRUE(bitwise_equal(first, ctx().to_host(out))) << "two runs differ";
        }
      }
    }
  }
}

TEST(Gemm, LinearTakesLeadingDimensions) {
  const DType dt = DType::bf16;
  Tensor xh = random_host({2, 3, 40}, dt), wh = random_host({24, 40}, dt);
  Tensor out = ctx().empty({2, 3, 24}, dt);
  poison(out);
  ops::linear(ctx(), ctx().to_device(xh), ctx().to_device(wh), Tensor(), out);
  const Reference ref = reference(to_doubles(xh), to_doubles(wh), nullptr, 1, 6, 24, 40, true);
  EXPECT_TRUE(gemm_close(ctx().to_host(out), ref));
}

TEST(Gemm, BatchedMatmulBothLayouts) {
  for (DType dt : kFloatTypes)
    for (bool b_transposed : {true, false})
      for (ops::GemmPath path : matmul_paths(false)) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (b_transposed ? " a@b^T " : " a@b ") << ops::gemm_path_name(path));
        const int64_t z = 3, m = 19, n = 37, k = 45;
        Tensor ah = random_host({z, m, k}, dt);
        Tensor bh = b_transposed ? random_host({z, n, k}, dt) : random_host({z, k, n}, dt);
        Tensor out = ctx().empty({z, m, n}, dt);
        poison(out);
        ops::batched_matmul(ctx(), ctx().to_device(ah), ctx().to_device(bh), b_transposed, 0.125f, out, path);
        const Reference ref = reference(to_doubles(ah), to_doubles(bh), nullptr, z, m, n, k, b_transposed, 0.125);
        EXPECT_TRUE(gemm_close(ctx().to_host(out), ref));
      }
}

TEST(Gemm, GroupedLinearWithEmptyExperts) {
  // Experts that receive no tokens, and experts with more rows than a pass of the grouped GEMV
  // takes: 79 rows over 6 experts (16 per pass; expert 3 more than one tile of rows), and 9 over
  // 16 (one per pass; expert 3 takes 5).
  const std::vector<std::vector<int32_t>> cases = {{5, 0, 3, 70, 0, 1}, {1, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1}};
  const int64_t n = 33, k = 50;
  for (const std::vector<int32_t>& counts : cases) {
    const int64_t e = static_cast<int64_t>(counts.size());
    std::vector<int32_t> off = {0};
    for (int32_t c : counts) off.push_back(off.back() + c);
    const int64_t t = off.back();
    Tensor offh = Tensor::empty_host({e + 1}, DType::i32);
    std::copy(off.begin(), off.end(), offh.data<int32_t>());
    const Tensor offsets = ctx().to_device(offh);
    std::vector<ops::GemmPath> paths = matmul_paths(true);
    paths.push_back(ops::GemmPath::gemv);
    for (DType dt : kFloatTypes)
      for (ops::GemmPath path : paths) {
        SCOPED_TRACE(::testing::Message() << t << " rows over " << e << " experts, " << dtype_name(dt) << " "
                                          << ops::gemm_path_name(path));
        Tensor xh = random_host({t, k}, dt), wh = random_host({e, n, k}, dt);
        Tensor out = ctx().empty({t, n}, dt);
        poison(out);
        ops::grouped_linear(ctx(), ctx().to_device(xh), ctx().to_device(wh), offsets, out, path);
        const std::vector<double> x = to_doubles(xh), w = to_doubles(wh);
        Reference ref;
        for (int64_t ex = 0; ex < e; ++ex) {
          const int64_t rows = off[ex + 1] - off[ex];
          const std::vector<double> xs(x.begin() + off[ex] * k, x.begin() + off[ex + 1] * k);
          const std::vector<double> ws(w.begin() + ex * n * k, w.begin() + (ex + 1) * n * k);
          const Reference r = reference(xs, ws, nullptr, 1, rows, n, k, true);
          ref.value.insert(ref.value.end(), r.value.begin(), r.value.end());
          ref.magnitude.insert(ref.magnitude.end(), r.magnitude.begin(), r.magnitude.end());
          ref.product.insert(ref.product.end(), r.product.begin(), r.product.end());
        }
        EXPECT_TRUE(gemm_close(ctx().to_host(out), ref));
      }
  }
}

Tensor random_int8(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty_host(std::move(shape), DType::i8);
  std::uniform_int_distribution<int> d(-127, 127);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int8_t>()[i] = static_cast<int8_t>(d(rng()));
  return t;
}

// Deterministic mode: a row of a linear has the same bits whatever M is and wherever the row
// sits in x (the vendor library's pinned algorithm, OpenBLAS one row at a time, or tiled), and
// is still within the float64 bounds.
TEST(Gemm, DeterministicLinearRowsDoNotDependOnTheBatch) {
  DeterministicScope deterministic(ctx());
  struct Shape {
    int64_t n, k;
    bool bias;
  };
  for (DType dt : kFloatTypes) {
    for (const Shape& sh : {Shape{96, 256, false}, Shape{72, 136, true}, Shape{33, 7, false}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", N " << sh.n << ", K " << sh.k << (sh.bias ? ", bias" : ""));
      const int64_t rows = 67, n = sh.n, k = sh.k;
      const Tensor xh = random_host({rows, k}, dt), wh = random_host({n, k}, dt), bh = random_host({n}, dt);
      const Tensor x = ctx().to_device(xh), w = ctx().to_device(wh), bias = sh.bias ? ctx().to_device(bh) : Tensor();
      Tensor all = ctx().empty({rows, n}, dt);
      poison(all);
      ops::linear(ctx(), x, w, bias, all);
      const Tensor all_h = ctx().to_host(all);
      const std::vector<double> bias_d = to_doubles(bh);
      EXPECT_TRUE(gemm_close(all_h, reference(to_doubles(xh), to_doubles(wh), sh.bias ? &bias_d : nullptr, 1, rows, n, k, true),
                             sh.bias && kVendorRoundsBeforeBias));
      for (int64_t m : {1, 2, 5, 16, 17, 40}) {
        const int64_t start = static_cast<int64_t>(rng()() % static_cast<uint64_t>(rows - m + 1));
        Tensor part = ctx().empty({m, n}, dt);
        poison(part);
        ops::linear(ctx(), x.slice(0, start, start + m), w, bias, part);
        EXPECT_TRUE(bitwise_equal(ctx().to_host(part), all_h.slice(0, start, start + m)))
            << "rows " << start << ".." << start + m - 1 << " alone differ from the same rows among " << rows;
      }
    }
  }
}

// Deterministic mode, grouped: an expert's rows have the same bits whatever the other experts
// and the expert's own row count are.
TEST(Gemm, DeterministicGroupedRowsDoNotDependOnTheBatch) {
  DeterministicScope deterministic(ctx());
  const int64_t e = 3, n = 40, k = 64;
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor xh = random_host({40, k}, dt), wh = random_host({e, n, k}, dt);
    const Tensor w = ctx().to_device(wh);
    auto run = [&](const Tensor& rows, const std::vector<int32_t>& offsets) {
      Tensor off = Tensor::empty_host({e + 1}, DType::i32);
      std::copy(offsets.begin(), offsets.end(), off.data<int32_t>());
      Tensor out = ctx().empty({rows.size(0), n}, dt);
      poison(out);
      ops::grouped_linear(ctx(), ctx().to_device(rows), w, ctx().to_device(off), out);
      return ctx().to_host(out);
    };
    const Tensor all = run(xh, {0, 13, 13, 40});
    // Expert 0's first 5 rows and expert 2's first 3, alone.
    Tensor few = Tensor::empty_host({8, k}, dt);
    std::memcpy(few.data_ptr(), xh.data_ptr(), 5 * k * dtype_size(dt));
    std::memcpy(static_cast<char*>(few.data_ptr()) + 5 * k * dtype_size(dt),
                static_cast<const char*>(xh.data_ptr()) + 13 * k * dtype_size(dt), 3 * k * dtype_size(dt));
    const Tensor part = run(few, {0, 5, 5, 8});
    EXPECT_TRUE(bitwise_equal(part.slice(0, 0, 5), all.slice(0, 0, 5)));
    EXPECT_TRUE(bitwise_equal(part.slice(0, 5, 8), all.slice(0, 13, 16)));
  }
}

TEST(Gemm, Int8LinearIsExactBeforeItsScales) {
  const int64_t shapes[][3] = {{1, 8, 16}, {3, 33, 7}, {16, 64, 260}, {70, 40, 128}, {9, 64, 1024}};
  std::vector<ops::GemmPath> paths = {ops::GemmPath::automatic, ops::GemmPath::tiled};
#if !defined(LW_TARGET_HOST)
  paths.push_back(ops::GemmPath::vendor);
#endif
  for (DType dt : kFloatTypes)
    for (const auto& s : shapes)
      for (ops::GemmPath path : paths) {
        const int64_t m = s[0], n = s[1], k = s[2];
        if (path == ops::GemmPath::vendor && k % 4 != 0) continue;  // cuBLASLt's int8 kernels need K % 4 == 0
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " M=" << m << " N=" << n << " K=" << k << " "
                                          << ops::gemm_path_name(path));
        Tensor xq = random_int8({m, k}), wq = random_int8({n, k});
        Tensor xs = random_host({m}, DType::f32, 0.001, 0.01), ws = random_host({n}, DType::f32, 0.001, 0.01);
        Tensor bh = random_host({n}, dt);
        Tensor out = ctx().empty({m, n}, dt);
        poison(out);
        ops::linear_int8(ctx(), ctx().to_device(xq), ctx().to_device(xs), ctx().to_device(wq), ctx().to_device(ws),
                         ctx().to_device(bh), out, path);
        // The int32 sum is exact; the epilogue's float products and bias add round a few times.
        std::vector<double> want(static_cast<size_t>(m * n));
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            int64_t acc = 0;
            for (int64_t l = 0; l < k; ++l) acc += int64_t{xq.data<int8_t>()[i * k + l]} * wq.data<int8_t>()[j * k + l];
            want[i * n + j] = static_cast<double>(acc) * xs.data<float>()[i] * ws.data<float>()[j] + element(bh, j);
          }
        EXPECT_TRUE(all_close(ctx().to_host(out), want, epsilon(dt) + 4 * epsilon(DType::f32), 1e-6));
      }
}

TEST(Gemm, Int8VendorPathOnTheHostIsAnError) {
#if defined(LW_TARGET_HOST)
  Tensor xq = ctx().to_device(random_int8({2, 8})), wq = ctx().to_device(random_int8({4, 8}));
  Tensor xs = ctx().to_device(random_host({2}, DType::f32)), ws = ctx().to_device(random_host({4}, DType::f32));
  Tensor out = ctx().empty({2, 4}, DType::f32);
  try {
    ops::linear_int8(ctx(), xq, xs, wq, ws, Tensor(), out, ops::GemmPath::vendor);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("OpenBLAS has no kernel"), std::string::npos) << e.what();
  }
#else
  GTEST_SKIP() << "the GPU targets have a vendor int8 GEMM";
#endif
}

TEST(Gemm, MisuseIsReported) {
  Tensor x = ctx().empty({4, 8}, DType::f16), w = ctx().empty({6, 8}, DType::f16), out = ctx().empty({4, 6}, DType::f16);
  expect_error([&] { ops::linear(ctx(), x, ctx().empty({6, 9}, DType::f16), Tensor(), out); }, "must end in in_features 9");
  expect_error([&] { ops::linear(ctx(), x, w, Tensor(), ctx().empty({4, 5}, DType::f16)); }, "must be [4, 6]");
  expect_error([&] { ops::linear(ctx(), x, ctx().empty({6, 8}, DType::bf16), Tensor(), out); }, "dtypes differ");
  expect_error([&] { ops::linear(ctx(), x, w, ctx().empty({5}, DType::f16), out); }, "bias");
  expect_error([&] { ops::linear(ctx(), ctx().empty({17, 8}, DType::f16), w, Tensor(), ctx().empty({17, 6}, DType::f16), ops::GemmPath::gemv); },
               "at most 16 rows");
  expect_error([&] { ops::linear(ctx(), x.transpose(0, 1), w, Tensor(), out); }, "contiguous");
  expect_error([&] { ops::grouped_linear(ctx(), x, w.view({1, 6, 8}), ctx().empty({3}, DType::i32), out); }, "offsets");
  expect_error([&] { ops::linear_int8(ctx(), x, ctx().empty({4}, DType::f32), w, ctx().empty({6}, DType::f32), Tensor(), out); },
               "must be contiguous 2-D i8");
}

}  // namespace
}  // namespace lw::test
