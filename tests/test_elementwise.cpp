// Elementwise ops against float64 references: random inputs, poisoned outputs, odd sizes,
// every float dtype, bit-identical reruns, and misuse.
#include <cmath>
#include <functional>

#include "ops/elementwise.h"
#include "test_util.h"

namespace lw::test {
namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

TEST(Add, MatchesFloat64ReferenceAndIsDeterministic) {
  for (DType dt : kFloatTypes) {
    for (int64_t n : {1, 7, 31, 32, 33, 63, 64, 65, 1000, 4097, 100003}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", n " << n);
      Tensor ah = random_host({n}, dt), bh = random_host({n}, dt);
      Tensor a = ctx().to_device(ah), b = ctx().to_device(bh), out = ctx().empty({n}, dt);
      poison(out);
      ops::add(ctx(), a, b, out);
      Tensor first = ctx().to_host(out);
      const std::vector<double> x = to_doubles(ah), y = to_doubles(bh), got = to_doubles(first);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = x[i] + y[i];
        // One rounding of the exact sum to the dtype.
        // (plus half the smallest f16 subnormal, for results that underflow)
        ASSERT_LE(std::abs(got[i] - ref), epsilon(dt) * std::abs(ref) + 3e-8) << "element " << i;
      }
      poison(out);
      ops::add(ctx(), a, b, out);
      EXPECT_TRUE(bitwise_equal(first, ctx().to_host(out))) << "two runs differ";
    }
  }
}

TEST(Add, RejectsBadArguments) {
  Tensor a = ctx().empty({4}, DType::f32), b = ctx().empty({5}, DType::f32), c = ctx().empty({4}, DType::f16);
  Tensor out = ctx().empty({4}, DType::f32);
  EXPECT_THROW(ops::add(ctx(), a, b, out), Error);
  EXPECT_THROW(ops::add(ctx(), a, c, out), Error);
  Tensor host = Tensor::empty_host({4}, DType::f32);
  EXPECT_THROW(ops::add(ctx(), a, host, out), Error);
  Tensor ints = ctx().empty({4}, DType::i32);
  EXPECT_THROW(ops::add(ctx(), ints, ints, ints), Error);
  try {
    ops::add(ctx(), a, b, out);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shapes differ"), std::string::npos) << e.what();
  }
}

using ops::Activation;

const int64_t kSizes[] = {1, 7, 31, 33, 63, 65, 1000, 4097, 100003};

double silu_ref(double x) { return x / (1 + std::exp(-x)); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_erf_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

// Output bound: one rounding to the output dtype plus float arithmetic of a few ulps.
double rel_bound(DType out) { return epsilon(out) + 8 * epsilon(DType::f32); }

// Runs op twice on poisoned outputs; checks against ref and that both runs agree bit for bit.
void check_unary(DType in_dt, DType out_dt, int64_t n, const std::function<void(const Tensor&, Tensor&)>& op,
                 const std::function<double(double)>& ref, double lo = -4, double hi = 4, double abs = 1e-7) {
  SCOPED_TRACE(::testing::Message() << dtype_name(in_dt) << " -> " << dtype_name(out_dt) << ", n " << n);
  Tensor xh = random_host({n}, in_dt, lo, hi);
  Tensor x = ctx().to_device(xh), out = ctx().empty({n}, out_dt);
  poison(out);
  op(x, out);
  Tensor first = ctx().to_host(out);
  std::vector<double> want;
  for (double v : to_doubles(xh)) want.push_back(ref(v));
  EXPECT_TRUE(all_close(first, want, rel_bound(out_dt), abs));
  poison(out);
  op(x, out);
  EXPECT_TRUE(bitwise_equal(first, ctx().to_host(out))) << "two runs differ";
}

TEST(Elementwise, MulAndResidualAdd) {
  for (DType dt : kFloatTypes) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", n " << n);
      Tensor ah = random_host({n}, dt), bh = random_host({n}, dt);
      Tensor a = ctx().to_device(ah), b = ctx().to_device(bh), out = ctx().empty({n}, dt);
      poison(out);
      ops::mul(ctx(), a, b, out);
      std::vector<double> x = to_doubles(ah), y = to_doubles(bh), prod, sum;
      for (size_t i = 0; i < x.size(); ++i) {
        prod.push_back(x[i] * y[i]);
        sum.push_back(x[i] + y[i]);
      }
      EXPECT_TRUE(all_close(ctx().to_host(out), prod, epsilon(dt), 3e-8));
      ops::residual_add(ctx(), a, b);  // a += b
      EXPECT_TRUE(all_close(ctx().to_host(a), sum, epsilon(dt), 3e-8));
    }
  }
}

TEST(Elementwise, SigmoidGatedAdd) {
  for (DType dt : kFloatTypes) {
    for (int64_t hidden : {1, 33, 200}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", hidden " << hidden);
      const int64_t tokens = 5;
      Tensor oh = random_host({tokens, hidden}, dt), gh = random_host({tokens, 1}, dt, -4, 4), xh = random_host({tokens, hidden}, dt);
      Tensor out = ctx().to_device(oh);
      ops::sigmoid_gated_add(ctx(), out, ctx().to_device(gh), ctx().to_device(xh));
      const std::vector<double> o = to_doubles(oh), g = to_doubles(gh), x = to_doubles(xh);
      std::vector<double> want(o.size());
      for (size_t i = 0; i < o.size(); ++i) want[i] = o[i] + x[i] / (1.0 + std::exp(-g[i / hidden]));
      EXPECT_TRUE(all_close(ctx().to_host(out), want, epsilon(dt), 1e-6));
    }
  }
  Tensor out = ctx().empty({2, 4}, DType::f32);
  EXPECT_THROW(ops::sigmoid_gated_add(ctx(), out, ctx().empty({2, 4}, DType::f32), out), Error);
}

TEST(Elementwise, ScaleAndCastBetweenEveryPairOfTypes) {
  for (DType dt : kFloatTypes) {
    for (int64_t n : kSizes) {
      check_unary(dt, dt, n, [](const Tensor& x, Tensor& out) { ops::scale(ctx(), x, -0.37f, out); },
                  [](double v) { return v * static_cast<double>(-0.37f); });
    }
  }
  for (DType from : kFloatTypes) {
    for (DType to : kFloatTypes) {
      for (int64_t n : {int64_t(1), int64_t(65), int64_t(4097)}) {
        check_unary(from, to, n, [](const Tensor& x, Tensor& out) { ops::cast(ctx(), x, out); },
                    [](double v) { return v; });
      }
    }
  }
}

TEST(Elementwise, Activations) {
  const std::pair<Activation, double (*)(double)> acts[] = {
      {Activation::silu, silu_ref}, {Activation::gelu_tanh, gelu_tanh_ref}, {Activation::gelu_erf, gelu_erf_ref}};
  for (auto [act, ref] : acts) {
    for (DType dt : kFloatTypes) {
      for (int64_t n : kSizes) {
        // 1 + erf / 1 + tanh cancel for negative inputs: float gives ~1e-7 absolute error there.
        check_unary(dt, dt, n, [act](const Tensor& x, Tensor& out) { ops::activation(ctx(), act, x, out); }, ref,
                    -8, 8, 1e-6);
      }
    }
  }
}

TEST(Elementwise, GatedActivations) {
  const std::pair<Activation, double (*)(double)> acts[] = {
      {Activation::silu, silu_ref}, {Activation::gelu_tanh, gelu_tanh_ref}, {Activation::gelu_erf, gelu_erf_ref}};
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 7}, {5, 33}, {2, 64}, {7, 1000}, {4, 1024}, {1, 4099}};
  for (auto [act, ref] : acts) {
    for (DType dt : kFloatTypes) {
      for (auto [tokens, inter] : shapes) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", " << tokens << "x" << inter);
        Tensor inh = random_host({tokens, 2 * inter}, dt, -6, 6);
        Tensor in = ctx().to_device(inh), out = ctx().empty({tokens, inter}, dt);
        poison(out);
        ops::act_mul(ctx(), act, in, out);
        const std::vector<double> v = to_doubles(inh);
        std::vector<double> want;
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t i = 0; i < inter; ++i) want.push_back(ref(v[t * 2 * inter + i]) * v[t * 2 * inter + inter + i]);
        Tensor first = ctx().to_host(out);
        EXPECT_TRUE(all_close(first, want, rel_bound(dt), 4e-6));
        poison(out);
        ops::act_mul(ctx(), act, in, out);
        EXPECT_TRUE(bitwise_equal(first, ctx().to_host(out)));
      }
    }
  }
}

TEST(Elementwise, MisalignedViewsTakeTheScalarPath) {
  Tensor xh = random_host({1001}, DType::bf16);
  Tensor x = ctx().to_device(xh).slice(0, 1, 1001);  // 2-byte offset: not 16-byte aligned
  Tensor out = ctx().empty({1000}, DType::f32);
  poison(out);
  ops::cast(ctx(), x, out);
  std::vector<double> all = to_doubles(xh), want(all.begin() + 1, all.end());
  EXPECT_TRUE(all_close(ctx().to_host(out), want, 0, 0));
}

TEST(Elementwise, RejectsMisuse) {
  Tensor a = ctx().empty({4, 6}, DType::f16), b = ctx().empty({4, 6}, DType::f16);
  Tensor odd = ctx().empty({4, 5}, DType::f16), f32 = ctx().empty({4, 6}, DType::f32);
  EXPECT_THROW(ops::scale(ctx(), a, NAN, b), Error);
  EXPECT_THROW(ops::scale(ctx(), a, 2.0f, f32), Error);
  EXPECT_THROW(ops::activation(ctx(), Activation::silu, a, f32), Error);
  EXPECT_THROW(ops::act_mul(ctx(), Activation::silu, odd, b), Error);     // odd last dimension
  EXPECT_THROW(ops::act_mul(ctx(), Activation::silu, a, b), Error);       // out must be [4, 3]
  EXPECT_THROW(ops::cast(ctx(), a.transpose(0, 1), f32.view({6, 4})), Error);  // non-contiguous
  EXPECT_THROW(ops::residual_add(ctx(), a, f32), Error);
  Tensor i32 = ctx().empty({4, 6}, DType::i32);
  EXPECT_THROW(ops::cast(ctx(), i32, f32), Error);
}

}  // namespace
}  // namespace lw::test
