// RMSNorm and LayerNorm, plain and fused with the residual add, against float64 references.
#include <cmath>

#include "kernels/row_plan.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "round_to.h"
#include "test_util.h"

namespace lw::test {
namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
// Hidden sizes: 1, odd, non-multiples of 32/64 and of the vector width, large (uncached path).
const int64_t kHidden[] = {1, 7, 33, 100, 129, 1000, 4096, 5120, 12345, 40000};

struct NormCase {
  bool layer;
  bool fused;
  bool bias;
};

void run_case(const NormCase& c, DType dt, int64_t rows, int64_t hidden) {
  SCOPED_TRACE(::testing::Message() << (c.layer ? "layer" : "rms") << (c.fused ? " fused" : "") << (c.bias ? " bias" : "")
                                    << ", " << dtype_name(dt) << ", " << rows << "x" << hidden);
  const float eps = 1e-5f;
  Tensor xh = random_host({rows, hidden}, dt, -2, 3), rh = random_host({rows, hidden}, dt, -2, 2);
  Tensor wh = random_host({hidden}, dt, 0.5, 1.5), bh = random_host({hidden}, dt, -1, 1);
  Tensor x = ctx().to_device(xh), w = ctx().to_device(wh), b = ctx().to_device(bh), out = ctx().empty({rows, hidden}, dt);
  Tensor res = ctx().to_device(rh);
  const Tensor bias = c.bias ? b : Tensor();
  auto run = [&] {
    poison(out);
    if (c.layer) {
      if (c.fused) ops::add_layer_norm(ctx(), x, res, w, bias, eps, out);
      else ops::layer_norm(ctx(), x, w, bias, eps, out);
    } else {
      if (c.fused) ops::add_rms_norm(ctx(), x, res, w, eps, out);
      else ops::rms_norm(ctx(), x, w, eps, out);
    }
  };
  run();
  Tensor first = ctx().to_host(out), res_after = ctx().to_host(res);

  const std::vector<double> xv = to_doubles(xh), rv = to_doubles(rh), wv = to_doubles(wh), bv = to_doubles(bh);
  std::vector<double> want(static_cast<size_t>(rows * hidden)), want_res;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> v(xv.begin() + r * hidden, xv.begin() + (r + 1) * hidden);
    if (c.fused) {
      for (int64_t i = 0; i < hidden; ++i) v[i] = round_to(dt, v[i] + rv[r * hidden + i]);
      want_res.insert(want_res.end(), v.begin(), v.end());
    }
    double mean = 0, var = 0, ms = 0;
    for (double e : v) mean += e / hidden;
    for (double e : v) {
      var += (e - mean) * (e - mean) / hidden;
      ms += e * e / hidden;
    }
    for (int64_t i = 0; i < hidden; ++i) {
      want[r * hidden + i] = c.layer ? (v[i] - mean) / std::sqrt(var + eps) * wv[i] + (c.bias ? bv[i] : 0.0)
                                     : v[i] / std::sqrt(ms + eps) * wv[i];
    }
  }
  // RMSNorm rounds twice (before and after the weight), LayerNorm once; the absolute term
  // covers float error where the bias cancels the normalised value.
  const double rel = 2 * epsilon(dt) + 1e-5;
  const double abs = 1e-5;
  EXPECT_TRUE(all_close(first, want, rel, abs));
  if (c.fused) EXPECT_TRUE(all_close(res_after, want_res, 0, 0)) << "residual";
  if (c.fused) res = ctx().to_device(rh);
  run();
  EXPECT_TRUE(bitwise_equal(first, ctx().to_host(out))) << "two runs differ";
}

TEST(Norm, RmsNormMatchesFloat64) {
  for (DType dt : kFloatTypes)
    for (int64_t h : kHidden) run_case({false, false, false}, dt, 3, h);
}

TEST(Norm, FusedAddRmsNormMatchesFloat64AndUpdatesTheResidual) {
  for (DType dt : kFloatTypes)
    for (int64_t h : kHidden) run_case({false, true, false}, dt, 3, h);
}

TEST(Norm, LayerNormWithAndWithoutBias) {
  for (DType dt : kFloatTypes)
    for (int64_t h : kHidden) {
      run_case({true, false, true}, dt, 2, h);
      run_case({true, false, false}, dt, 2, h);
      run_case({true, true, true}, dt, 2, h);
    }
}

TEST(RowPlan, OneVectorAThreadForFewRowsFourForMany) {
  auto plan = [](int64_t nvec, int64_t blocks, int warp) { return kernels::row_threads_with(nvec, blocks, warp, 0); };
  EXPECT_EQ(plan(512, 1, 32), 512);    // one 4096-wide bf16 row
  EXPECT_EQ(plan(512, 256, 64), 512);  // 2^17 vectors: still one each
  EXPECT_EQ(plan(512, 257, 32), 128);  // past it: four each
  EXPECT_EQ(plan(5000, 1, 32), 1024);  // at most 1024 threads
  EXPECT_EQ(plan(7, 1, 64), 64);       // at least a warp
  EXPECT_EQ(plan(2250, 70, 32), 576);  // 2250 / 4 rounded up to the warp
  // A forced count applies at every size.
  EXPECT_EQ(kernels::row_threads_with(512, 1, 32, 4), 128);
  EXPECT_EQ(kernels::row_threads_with(512, 1000, 32, 1), 512);
}

// Launches past the few-vector plan's 2^17 vectors, where threads take several vectors each
// (the other cases above all take one).
TEST(Norm, ManyRowsTakeSeveralVectorsAThread) {
  run_case({false, true, false}, DType::bf16, 260, 4096);
  run_case({true, false, true}, DType::f32, 70, 9000);
}

TEST(Norm, FusedEqualsUnfusedBitForBit) {
  for (DType dt : kFloatTypes) {
    const int64_t rows = 5, hidden = 1000;
    Tensor xh = random_host({rows, hidden}, dt), rh = random_host({rows, hidden}, dt), wh = random_host({hidden}, dt);
    Tensor x = ctx().to_device(xh), w = ctx().to_device(wh);
    Tensor r1 = ctx().to_device(rh), r2 = ctx().to_device(rh);
    Tensor fused = ctx().empty({rows, hidden}, dt), plain = ctx().empty({rows, hidden}, dt);
    ops::add_rms_norm(ctx(), x, r1, w, 1e-6f, fused);
    ops::residual_add(ctx(), r2, x);
    ops::rms_norm(ctx(), r2, w, 1e-6f, plain);
    EXPECT_TRUE(bitwise_equal(ctx().to_host(fused), ctx().to_host(plain))) << dtype_name(dt);
    EXPECT_TRUE(bitwise_equal(ctx().to_host(r1), ctx().to_host(r2))) << dtype_name(dt);
  }
}

TEST(Norm, RejectsMisuse) {
  Tensor x = ctx().empty({2, 8}, DType::bf16), out = ctx().empty({2, 8}, DType::bf16);
  Tensor w = ctx().empty({8}, DType::bf16), w_short = ctx().empty({7}, DType::bf16), w_f32 = ctx().empty({8}, DType::f32);
  EXPECT_THROW(ops::rms_norm(ctx(), x, w_short, 1e-6f, out), Error);
  EXPECT_THROW(ops::rms_norm(ctx(), x, w_f32, 1e-6f, out), Error);
  EXPECT_THROW(ops::rms_norm(ctx(), x, w, -1.0f, out), Error);
  Tensor res_wrong = ctx().empty({2, 9}, DType::bf16);
  EXPECT_THROW(ops::add_rms_norm(ctx(), x, res_wrong, w, 1e-6f, out), Error);
  EXPECT_THROW(ops::layer_norm(ctx(), x, w, w_short, 1e-5f, out), Error);
  Tensor out_f32 = ctx().empty({2, 8}, DType::f32);
  EXPECT_THROW(ops::layer_norm(ctx(), x, w, Tensor(), 1e-5f, out_f32), Error);
}

}  // namespace
}  // namespace lw::test
