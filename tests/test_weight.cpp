// ops::Weight and linear over it: a dense Weight runs the tensor linear (bit for bit), an int8
// per-channel Weight runs W8A8 (activations quantised per token, int8 GEMM, both scales) and
// agrees with a float64 reference; the factories refuse malformed tensors, and linear refuses
// the formats this build declares but has no kernel for, naming them. GGUF block weights are
// tested against gguf's own dequantisation in tests/weights/test_gguf_linear.cpp.
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/gemm.h"
#include "ops/weight.h"
#include "test_util.h"

namespace lw::test {
namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

Tensor random_int8(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty_host(std::move(shape), DType::i8);
  std::uniform_int_distribution<int> d(-127, 127);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int8_t>()[i] = static_cast<int8_t>(d(rng()));
  return t;
}


#define EXPECT_ERROR(call, part)                                                                   \
  do {                                                                                             \
    const std::string msg_ = error_of([&] { call; });                                              \
    EXPECT_NE(msg_.find(part), std::string::npos) << "missing \"" << (part) << "\" in: " << msg_; \
  } while (0)

std::vector<ops::GemmPath> float_paths(int64_t m) {
  std::vector<ops::GemmPath> paths = {ops::GemmPath::automatic, ops::GemmPath::vendor, ops::GemmPath::tiled};
  if (m <= 16) paths.push_back(ops::GemmPath::gemv);
  return paths;
}

TEST(Weight, DenseLinearIsTheTensorLinearBitForBit) {
  struct Shape {
    std::vector<int64_t> lead;  // x's leading dimensions
    int64_t n, k;
  };
  const Shape shapes[] = {{{1}, 9, 17}, {{3}, 33, 7}, {{16}, 40, 64}, {{2, 9}, 21, 45}, {{37}, 64, 130}};
  for (DType dt : kFloatTypes)
    for (const Shape& s : shapes) {
      int64_t m = 1;
      for (int64_t d : s.lead) m *= d;
      for (ops::GemmPath path : float_paths(m))
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " M=" << m << " N=" << s.n << " K=" << s.k << " "
                                            << ops::gemm_path_name(path) << (with_bias ? " bias" : ""));
          std::vector<int64_t> x_shape = s.lead, out_shape = s.lead;
          x_shape.push_back(s.k);
          out_shape.push_back(s.n);
          const Tensor x = ctx().to_device(random_host(x_shape, dt));
          const Tensor w = ctx().to_device(random_host({s.n, s.k}, dt));
          const Tensor bias = with_bias ? ctx().to_device(random_host({s.n}, dt)) : Tensor();
          Tensor want = ctx().empty(out_shape, dt), got = ctx().empty(out_shape, dt);
          poison(want);
          poison(got);
          ops::linear(ctx(), x, w, bias, want, path);
          const ops::Weight weight = ops::Weight::dense(w);
          EXPECT_EQ(weight.out_features(), s.n);
          EXPECT_EQ(weight.in_features(), s.k);
          EXPECT_EQ(weight.device_bytes(), w.nbytes());
          ops::linear(ctx(), x, weight, bias, got, path);
          EXPECT_TRUE(bitwise_equal(ctx().to_host(got), ctx().to_host(want)));
        }
    }
}

// The host mirror of quantize_per_token (checked exactly against the kernel in test_quant):
// s = absmax / 127, q = clamp(rint(x * (127 / absmax)), -127, 127), in float.
void quantize_rows(const std::vector<double>& x, int64_t rows, int64_t cols, std::vector<int8_t>& q,
                   std::vector<float>& scales) {
  q.resize(x.size());
  scales.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::abs(static_cast<float>(x[r * cols + c])));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    scales[r] = amax / 127.0f;
    for (int64_t c = 0; c < cols; ++c)
      q[r * cols + c] = static_cast<int8_t>(std::clamp(std::rint(static_cast<float>(x[r * cols + c]) * inv), -127.0f, 127.0f));
  }
}

TEST(Weight, Int8PerChannelLinearMatchesTheFloat64Reference) {
  struct Shape {
    std::vector<int64_t> lead;
    int64_t n, k;
  };
  const Shape shapes[] = {{{1}, 7, 13}, {{1}, 64, 256}, {{3}, 33, 7}, {{5}, 40, 101}, {{2, 3}, 19, 64}, {{17}, 65, 300},
                          {{70}, 24, 128}};
  std::vector<ops::GemmPath> paths = {ops::GemmPath::automatic, ops::GemmPath::tiled};
#if !defined(LW_TARGET_HOST)
  paths.push_back(ops::GemmPath::vendor);
#endif
  for (DType dt : kFloatTypes)
    for (const Shape& s : shapes)
      for (ops::GemmPath path : paths)
        for (bool with_bias : {false, true}) {
          const int64_t n = s.n, k = s.k;
          if (path == ops::GemmPath::vendor && k % 4 != 0) continue;  // cuBLASLt's int8 kernels need K % 4 == 0
          int64_t m = 1;
          for (int64_t d : s.lead) m *= d;
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " M=" << m << " N=" << n << " K=" << k << " "
                                            << ops::gemm_path_name(path) << (with_bias ? " bias" : ""));
          std::vector<int64_t> x_shape = s.lead, out_shape = s.lead;
          x_shape.push_back(k);
          out_shape.push_back(n);
          const Tensor xh = random_host(x_shape, dt, -3.0, 3.0);
          const Tensor wq = random_int8({n, k});
          const Tensor ws = random_host({n}, DType::f32, 0.001, 0.01);
          const Tensor bh = random_host({n}, dt);
          const ops::Weight weight = ops::Weight::int8_per_channel(ctx().to_device(wq), ctx().to_device(ws));
          EXPECT_EQ(weight.device_bytes(), static_cast<size_t>(n * k + 4 * n));
          Tensor out = ctx().empty(out_shape, dt);
          poison(out);
          ops::linear(ctx(), ctx().to_device(xh), weight, with_bias ? ctx().to_device(bh) : Tensor(), out, path);

          // Reference: the per-token-quantised activations times the dequantised weights, in
          // float64. The int32 accumulation is exact and |sum| < 2^24 here, so it converts to
          // float exactly; then the epilogue's two float products and the bias add (each within
          // 2^-24 of its operands' size) and the one rounding to the output dtype. Bound per
          // element: eps(dt) |ref| + 4 * 2^-24 (|product| + |bias|), plus the f16/bf16
          // subnormal step.
          std::vector<int8_t> xq;
          std::vector<float> xs;
          quantize_rows(to_doubles(xh), m, k, xq, xs);
          const Tensor got = ctx().to_host(out);
          const double eps = epsilon(dt), f32_step = std::ldexp(1.0, -24);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              int64_t acc = 0;
              for (int64_t l = 0; l < k; ++l) acc += int64_t{xq[i * k + l]} * wq.data<int8_t>()[j * k + l];
              const double product = static_cast<double>(acc) * xs[i] * ws.data<float>()[j];
              const double b = with_bias ? element(bh, j) : 0.0;
              const double ref = product + b;
              const double tol = eps * std::abs(ref) + 4 * f32_step * (std::abs(product) + std::abs(b)) + 1e-7;
              const double v = element(got, i * n + j);
              ASSERT_LE(std::abs(v - ref), tol) << "element [" << i << ", " << j << "]: " << v << " vs " << ref;
            }
        }
}

TEST(Weight, Int8PerChannelLinearRefusesMisuse) {
  const ops::Weight w = ops::Weight::int8_per_channel(ctx().to_device(random_int8({6, 8})),
                                                      ctx().to_device(random_host({6}, DType::f32, 0.001, 0.01)));
  const Tensor x = ctx().to_device(random_host({4, 8}, DType::f16));
  const Tensor out = ctx().empty({4, 6}, DType::f16);
  EXPECT_ERROR(ops::linear(ctx(), ctx().to_device(random_host({4, 9}, DType::f16)), w, Tensor(), out),
               "must end in in_features 8");
  EXPECT_ERROR(ops::linear(ctx(), x, w, Tensor(), ctx().empty({4, 5}, DType::f16)), "must be [4, 6]");
  EXPECT_ERROR(ops::linear(ctx(), x, w, Tensor(), ctx().empty({4, 6}, DType::f32)), "dtypes differ");
  EXPECT_ERROR(ops::linear(ctx(), x, w, ctx().empty({5}, DType::f16), out), "bias");
  EXPECT_ERROR(ops::linear(ctx(), x, w, Tensor(), out, ops::GemmPath::gemv), "gemv path is for floating-point");
  EXPECT_ERROR(ops::linear(ctx(), x, ops::Weight(), Tensor(), out), "the weight is undefined");
}

TEST(Weight, FactoriesRefuseMalformedTensors) {
  auto dev = [](std::vector<int64_t> shape, DType dt) { return ctx().empty(std::move(shape), dt); };
  // dense
  EXPECT_ERROR(ops::Weight::dense(dev({4, 8}, DType::i8)), "must be f32, f16 or bf16");
  EXPECT_ERROR(ops::Weight::dense(dev({4, 8, 2}, DType::f16)), "must be [out_features, in_features]");
  EXPECT_ERROR(ops::Weight::dense(Tensor::empty_host({4, 8}, DType::f16)), "must be on the device");
  EXPECT_ERROR(ops::Weight::dense(dev({8, 4}, DType::f32).transpose(0, 1)), "must be contiguous");
  EXPECT_ERROR(ops::Weight::dense(Tensor()), "undefined tensor");
  // int8 per channel
  EXPECT_ERROR(ops::Weight::int8_per_channel(dev({4, 8}, DType::f16), dev({4}, DType::f32)), "must be 2-D i8");
  EXPECT_ERROR(ops::Weight::int8_per_channel(dev({4, 8}, DType::i8), dev({5}, DType::f32)), "must be f32[4]");
  EXPECT_ERROR(ops::Weight::int8_per_channel(dev({4, 8}, DType::i8), dev({4}, DType::f16)), "must be f32[4]");
  EXPECT_ERROR(ops::Weight::int8_per_channel(dev({4, 8}, DType::i8), dev({4, 1}, DType::f32)), "must be f32[4]");
  EXPECT_ERROR(ops::Weight::int8_per_channel(dev({4, 8}, DType::i8), Tensor()), "scales is an undefined tensor");
  // fp8
  EXPECT_ERROR(ops::Weight::fp8_per_tensor(dev({4, 8}, DType::i8), dev({2}, DType::f32)), "must be one f32");
  EXPECT_ERROR(ops::Weight::fp8_per_channel(dev({4, 8}, DType::i8), dev({8}, DType::f32)), "must be f32[4]");
  EXPECT_ERROR(ops::Weight::fp8_per_block(dev({300, 200}, DType::i8), dev({2, 2}, DType::f32), {128, 128}),
               "must be f32[3, 2]");
  EXPECT_ERROR(ops::Weight::fp8_per_block(dev({300, 200}, DType::i8), dev({3, 2}, DType::f32), {0, 128}),
               "positive sides");
  // int4 GPTQ / AWQ: N = 16, K = 64, group 32
  const Tensor scales = dev({2, 16}, DType::f16), zeros = dev({2, 2}, DType::i32);
  EXPECT_ERROR(ops::Weight::int4_gptq(16, 64, dev({8, 16}, DType::i32), zeros, scales, 48), "group_size 48");
  EXPECT_ERROR(ops::Weight::int4_gptq(16, 64, dev({64, 2}, DType::i32), zeros, scales, 32), "qweight");
  EXPECT_ERROR(ops::Weight::int4_gptq(16, 64, dev({8, 16}, DType::i32), dev({2, 16}, DType::i32), scales, 32),
               "qzeros");
  EXPECT_ERROR(ops::Weight::int4_gptq(16, 64, dev({8, 16}, DType::i32), zeros, scales, 32, dev({63}, DType::i32)),
               "g_idx");
  EXPECT_ERROR(ops::Weight::int4_gptq(16, 64, dev({8, 16}, DType::i32), zeros, dev({2, 16}, DType::i32), 32),
               "must be f16, bf16 or f32[2, 16]");
  EXPECT_ERROR(ops::Weight::int4_gptq(12, 64, dev({8, 12}, DType::i32), zeros, scales, 32), "multiples of 8");
  EXPECT_ERROR(ops::Weight::int4_awq(16, 64, dev({8, 16}, DType::i32), zeros, scales, 32), "qweight");
  // GGUF blocks: q4_0 is 18 bytes per 32 elements
  EXPECT_ERROR(ops::Weight::gguf(ops::WeightFormat::gguf_q4_0, 4, 64, dev({4 * 2 * 18 - 1}, DType::i8)),
               "the 144 bytes of gguf_q4_0 [4, 64]");
  EXPECT_ERROR(ops::Weight::gguf(ops::WeightFormat::gguf_q4_k, 4, 64, dev({4 * 144}, DType::i8)),
               "K whole blocks of 256");
  EXPECT_ERROR(ops::Weight::gguf(ops::WeightFormat::int8_per_channel, 4, 64, dev({256}, DType::i8)),
               "int8_per_channel is not a GGUF block format");
}

// Formats a later build will run are described and checked now, but linear refuses them.
TEST(Weight, LinearRefusesFormatsWithoutAKernel) {
  auto dev = [](std::vector<int64_t> shape, DType dt) { return ctx().empty(std::move(shape), dt); };
  const int64_t n = 16, k = 256;
  std::vector<ops::Weight> declared = {
      ops::Weight::int4_gptq(n, k, dev({k / 8, n}, DType::i32), dev({k / 128, n / 8}, DType::i32),
                             dev({k / 128, n}, DType::f16), 128, dev({k}, DType::i32)),
      ops::Weight::int4_awq(n, k, dev({k, n / 8}, DType::i32), dev({k / 128, n / 8}, DType::i32),
                            dev({k / 128, n}, DType::bf16), 128),
  };
  const Tensor x = ctx().to_device(random_host({3, k}, DType::bf16));
  for (const ops::Weight& w : declared) {
    SCOPED_TRACE(w.name());
    EXPECT_EQ(w.out_features(), n);
    EXPECT_EQ(w.in_features(), k);
    EXPECT_GT(w.device_bytes(), 0u);
    Tensor out = ctx().empty({3, n}, DType::bf16);
    const std::string msg = error_of([&] { ops::linear(ctx(), x, w, Tensor(), out); });
    EXPECT_NE(msg.find(std::string("has format ") + w.name()), std::string::npos) << msg;
    EXPECT_NE(msg.find("no linear kernel for it yet"), std::string::npos) << msg;
  }
  EXPECT_EQ(declared[0].group_size(), 128);
  EXPECT_TRUE(declared[0].g_idx().defined());
  EXPECT_EQ(ops::Weight::fp8_per_block(dev({n, k}, DType::i8), dev({1, 2}, DType::f32), {128, 128}).block().rows, 128);
  EXPECT_EQ(std::string(ops::weight_format_name(ops::WeightFormat::gguf_q6_k)), "gguf_q6_k");
}

}  // namespace
}  // namespace lw::test
