// ops::Weight and linear over it: a dense Weight runs the tensor linear (bit for bit), an int8
// per-channel Weight runs W8A8 (activations quantised per token, int8 GEMM, both scales) and
// agrees with a float64 reference; the factories refuse malformed tensors, and linear refuses
// the formats this build declares but has no kernel for, naming them. GGUF block weights are
// tested against gguf's own dequantisation in tests/weights/test_gguf_linear.cpp.
#include <algorithm>
#include <cmath>
#include <string>

#include "gpu/numeric.h"
#include "kernels/quant/fp8.h"
#include "ops/gemm.h"
#include "ops/quant.h"
#include "ops/weight.h"
#include "test_util.h"

namespace lw::test {
namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// v rounded once to dtype (what the expansion of a weight into x's dtype holds).
double rounded(float v, DType dtype) {
  if (dtype == DType::f16) return gpu::to_float(gpu::from_float<half>(v));
  if (dtype == DType::bf16) return gpu::to_float(gpu::from_float<bfloat16>(v));
  return v;
}

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
  // int4 tiles: N = 16, K = 64 is one tile of 512 bytes; group 32 gives two groups
  const Tensor tiles = dev({512}, DType::i8), scales = dev({16, 2}, DType::f32), zeros = dev({16, 2}, DType::i8);
  EXPECT_ERROR(ops::Weight::int4(16, 64, dev({511}, DType::i8), scales, zeros, 32), "the 512 bytes of [16, 64]");
  EXPECT_ERROR(ops::Weight::int4(16, 64, tiles, dev({16, 2}, DType::f16), zeros, 32), "scales f16[16, 2] gpu must be f32[16, 2]");
  EXPECT_ERROR(ops::Weight::int4(16, 64, tiles, scales, dev({16, 1}, DType::i8), 32), "must be i8[16, 2]");
  EXPECT_ERROR(ops::Weight::int4(16, 64, tiles, scales, zeros, 32, dev({63}, DType::i32)), "perm");
  EXPECT_ERROR(ops::Weight::int4(16, 64, tiles, scales, zeros, 0), "group_size 0 must be positive");
  // GGUF blocks: q4_0 is 18 bytes per 32 elements
  EXPECT_ERROR(ops::Weight::gguf(ops::WeightFormat::gguf_q4_0, 4, 64, dev({4 * 2 * 18 - 1}, DType::i8)),
               "the 144 bytes of gguf_q4_0 [4, 64]");
  EXPECT_ERROR(ops::Weight::gguf(ops::WeightFormat::gguf_q4_k, 4, 64, dev({4 * 144}, DType::i8)),
               "K whole blocks of 256");
  EXPECT_ERROR(ops::Weight::gguf(ops::WeightFormat::int8_per_channel, 4, 64, dev({256}, DType::i8)),
               "int8_per_channel is not a GGUF block format");
}

Tensor random_e4m3(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty_host(std::move(shape), DType::i8);
  std::uniform_int_distribution<int> d(0, 255);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int b = d(rng());
    if ((b & 0x7F) == 0x7F) b ^= 1;  // no NaN codes
    t.data<int8_t>()[i] = static_cast<int8_t>(b);
  }
  return t;
}

// A random FP8 weight of one scale layout (block: block_rows x block_cols scales), with its
// values as the reference reads them.
struct Fp8Weight {
  ops::WeightFormat format;
  int64_t n, k, block_rows = 128, block_cols = 128;
  Tensor wq, ws;
  ops::Weight w;

  Fp8Weight(ops::WeightFormat f, int64_t n_, int64_t k_, int64_t br = 128, int64_t bc = 128)
      : format(f), n(n_), k(k_), block_rows(br), block_cols(bc), wq(random_e4m3({n_, k_})) {
    const bool block = f == ops::WeightFormat::fp8_e4m3_per_block;
    ws = random_host(block ? std::vector<int64_t>{(n + br - 1) / br, (k + bc - 1) / bc}
                     : f == ops::WeightFormat::fp8_e4m3_per_channel ? std::vector<int64_t>{n}
                                                                     : std::vector<int64_t>{1},
                     DType::f32, 0.001, 0.01);
    const Tensor q = ctx().to_device(wq), sc = ctx().to_device(ws);
    w = block ? ops::Weight::fp8_per_block(q, sc, {br, bc})
        : f == ops::WeightFormat::fp8_e4m3_per_channel ? ops::Weight::fp8_per_channel(q, sc)
                                                        : ops::Weight::fp8_per_tensor(q, sc);
  }
  // Element [j, l] in fp32 (the expansion's value before its rounding to x's dtype).
  float value(int64_t j, int64_t l) const {
    const float* s = ws.data<float>();
    const float scale = format == ops::WeightFormat::fp8_e4m3_per_block ? s[(j / block_rows) * ws.size(1) + l / block_cols]
                        : format == ops::WeightFormat::fp8_e4m3_per_channel ? s[j]
                                                                             : s[0];
    return kernels::fp8_e4m3_to_float(static_cast<uint8_t>(wq.data<int8_t>()[j * k + l])) * scale;
  }
};

// x [m, k] (as the reference reads it) times the weight's values (`round`: rounded to dt
// first), in float64: the products and the sums of their magnitudes.
void fp8_reference(const std::vector<double>& xv, const Fp8Weight& fw, int64_t m, DType dt, bool round,
                   std::vector<double>& product, std::vector<double>& mag) {
  const int64_t n = fw.n, k = fw.k;
  product.assign(static_cast<size_t>(m * n), 0.0);
  mag.assign(product.size(), 0.0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t l = 0; l < k; ++l) {
      const float v = fw.value(j, l);
      const double wv = round ? rounded(v, dt) : v;
      for (int64_t i = 0; i < m; ++i) {
        product[i * n + j] += xv[i * k + l] * wv;
        mag[i * n + j] += std::abs(xv[i * k + l] * wv);
      }
    }
}

// x with rows and 128-column groups of very different sizes (2^-4 .. 2^4), so that a scale
// applied to the wrong row or group shows.
Tensor uneven_input(int64_t m, int64_t k, DType dt) {
  Tensor f = random_host({m, k}, DType::f32, -1.0, 1.0);
  std::uniform_real_distribution<float> e(-4.0f, 4.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g * 128 < k; ++g) {
      const float s = std::exp2(e(rng()));
      for (int64_t l = g * 128; l < std::min(k, (g + 1) * 128); ++l) f.data<float>()[i * k + l] *= s;
    }
  Tensor h = Tensor::empty_host({m, k}, dt);
  for (int64_t i = 0; i < m * k; ++i) {
    const float v = f.data<float>()[i];
    if (dt == DType::bf16) h.data<bfloat16>()[i] = gpu::from_float<bfloat16>(v);
    else if (dt == DType::f16) h.data<half>()[i] = gpu::from_float<half>(v);
    else h.data<float>()[i] = v;
  }
  return h;
}

// The fused FP8 GEMV (W8A16) on rows long enough for its loads in flight and their tail (K =
// 4160: 260 runs of 16), every scale layout, blocks narrower than a run of 16 included, at 1,
// 3 and 9 rows (two passes of rows), on every target (the forced gemv path).
TEST(Weight, Fp8GemvMatchesTheFloat64Reference) {
  const std::vector<Fp8Weight> weights = {{ops::WeightFormat::fp8_e4m3_per_block, 72, 4160},
                                          {ops::WeightFormat::fp8_e4m3_per_block, 24, 4160, 8, 40},
                                          {ops::WeightFormat::fp8_e4m3_per_channel, 40, 4160},
                                          {ops::WeightFormat::fp8_e4m3_per_tensor, 16, 4160}};
  for (const Fp8Weight& fw : weights)
    for (DType dt : kFloatTypes)
      for (int64_t m : {1, 3, 9}) {
        const ops::GemmPath path = ops::GemmPath::gemv;
        SCOPED_TRACE(::testing::Message() << fw.w.describe() << " block " << fw.block_cols << " " << dtype_name(dt)
                                          << " M=" << m);
        const int64_t n = fw.n, k = fw.k;
        const Tensor xh = uneven_input(m, k, dt), bh = random_host({n}, dt);
        Tensor out = ctx().empty({m, n}, dt);
        poison(out);
        ops::linear(ctx(), ctx().to_device(xh), fw.w, ctx().to_device(bh), out, path);
        const Tensor got = ctx().to_host(out);
        std::vector<double> product, mag;
        fp8_reference(to_doubles(xh), fw, m, dt, true, product, mag);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const double want = product[i * n + j] + element(bh, j), size = mag[i * n + j] + std::abs(element(bh, j));
            const double bound = epsilon(dt) * std::abs(want) + (k * 0x1p-24 + epsilon(dt)) * size + 1e-6;
            ASSERT_LE(std::abs(element(got, i * n + j) - want), bound) << "element [" << i << ", " << j << "]";
          }
      }
}

// FP8 weights on the automatic and vendor paths: where the device has FP8 tensor cores the
// tensor-core GEMV (up to 8 rows, K a multiple of 128) or the vendor's scaled FP8 GEMM over x
// quantised by quantize_fp8 (W8A8: the reference uses those codes and scales; rows padded to 4
// for the library's block scales), elsewhere the GEMV (up to 4 rows) or the expansion and the
// dense GEMM (W8A16: the reference uses x and the weights rounded to x's dtype). Every scale
// layout; row counts that are not multiples of the 16-row tiles; rows of x and their 128-column
// groups of very different sizes (each scale used where it belongs); a block size and an
// activation dtype (f32) the FP8 kernels do not take (W8A16 everywhere). A bias of the wrong
// dtype or length is refused on both paths.
TEST(Weight, Fp8LinearIsW8A8WhereTheDeviceHasFp8GemmElseW8A16) {
  const bool fp8_gemm = ops::has_fp8_gemm(ctx().caps());
  const std::vector<Fp8Weight> weights = {{ops::WeightFormat::fp8_e4m3_per_block, 200, 512},
                                          {ops::WeightFormat::fp8_e4m3_per_block, 136, 1024},
                                          {ops::WeightFormat::fp8_e4m3_per_block, 64, 256, 64, 64},
                                          {ops::WeightFormat::fp8_e4m3_per_channel, 48, 80},
                                          {ops::WeightFormat::fp8_e4m3_per_channel, 40, 384},
                                          {ops::WeightFormat::fp8_e4m3_per_tensor, 40, 96},
                                          {ops::WeightFormat::fp8_e4m3_per_tensor, 24, 256}};
  for (const Fp8Weight& fw : weights)
    for (DType dt : {DType::bf16, DType::f16, DType::f32})
      for (int64_t m : {1, 5, 8, 130}) {
        const int64_t n = fw.n, k = fw.k;
        const bool block = fw.format == ops::WeightFormat::fp8_e4m3_per_block;
        if (dt == DType::f32 && m > 5) continue;  // f32: W8A16 everywhere, two row counts suffice
        const bool w8a8 = fp8_gemm && dt != DType::f32 && (!block || (fw.block_cols == 128 && fw.block_rows == 128));
        SCOPED_TRACE(::testing::Message() << fw.w.describe() << " block " << fw.block_rows << "x" << fw.block_cols << " "
                                          << dtype_name(dt) << " M=" << m << (w8a8 ? " W8A8" : " W8A16"));
        const Tensor xh = uneven_input(m, k, dt), bh = random_host({n}, dt);
        const Tensor x = ctx().to_device(xh);
        // The activations the reference multiplies: quantize_fp8's codes and scales (W8A8) or x.
        const int64_t group = block ? 128 : k;
        std::vector<double> xv = to_doubles(xh);
        if (w8a8) {
          Tensor xq = ctx().empty({m, k}, DType::i8), xs = ctx().empty({k / group, m}, DType::f32);
          ops::quantize_fp8(ctx(), x, group, xq, xs);
          const Tensor xqh = ctx().to_host(xq), xsh = ctx().to_host(xs);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t l = 0; l < k; ++l)
              xv[i * k + l] = kernels::fp8_e4m3_to_float(static_cast<uint8_t>(xqh.data<int8_t>()[i * k + l])) *
                              static_cast<double>(xsh.data<float>()[(l / group) * m + i]);
        }
        std::vector<double> product, mag;
        fp8_reference(xv, fw, m, dt, !w8a8, product, mag);
        for (const auto& [path, with_bias] : {std::pair{ops::GemmPath::automatic, false}, std::pair{ops::GemmPath::vendor, true}}) {
          SCOPED_TRACE(::testing::Message() << ops::gemm_path_name(path) << (with_bias ? " bias" : ""));
          Tensor out = ctx().empty({m, n}, dt);
          poison(out);
          ops::linear(ctx(), x, fw.w, with_bias ? ctx().to_device(bh) : Tensor(), out, path);
          const Tensor got = ctx().to_host(out);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              const double b = with_bias ? element(bh, j) : 0.0, want = product[i * n + j] + b;
              const double size = mag[i * n + j] + std::abs(b);
              // The output's rounding; fp32 sums (W8A16), or the FP8 tensor cores' partial sums,
              // kept to about 14 bits and promoted to fp32 every 128 terms (W8A8: 2^-10 of the
              // magnitude; a scale applied to the wrong row, group or block is off by far more).
              const double bound = epsilon(dt) * std::abs(want) + (w8a8 ? 0x1p-10 : k * 0x1p-24 + epsilon(dt)) * size + 1e-6;
              ASSERT_LE(std::abs(element(got, i * n + j) - want), bound) << "element [" << i << ", " << j << "]";
            }
        }
      }
  const Fp8Weight& fw = weights[0];
  const Tensor x = ctx().to_device(random_host({3, fw.k}, DType::bf16));
  Tensor out = ctx().empty({3, fw.n}, DType::bf16);
  for (ops::GemmPath path : {ops::GemmPath::automatic, ops::GemmPath::vendor}) {
    EXPECT_ERROR(ops::linear(ctx(), x, fw.w, ctx().empty({fw.n}, DType::f32), out, path), "bias");
    EXPECT_ERROR(ops::linear(ctx(), x, fw.w, ctx().empty({fw.n - 1}, DType::bf16), out, path), "bias");
  }
}

TEST(Weight, FormatNamesAndBlocks) {
  auto dev = [](std::vector<int64_t> shape, DType dt) { return ctx().empty(std::move(shape), dt); };
  EXPECT_EQ(ops::Weight::fp8_per_block(dev({16, 256}, DType::i8), dev({1, 2}, DType::f32), {128, 128}).block().rows, 128);
  EXPECT_EQ(std::string(ops::weight_format_name(ops::WeightFormat::gguf_q6_k)), "gguf_q6_k");
  const ops::Weight w4 = ops::Weight::int4(16, 256, dev({4 * 512}, DType::i8), dev({16, 2}, DType::f32),
                                           dev({16, 2}, DType::i8), 128);
  EXPECT_EQ(std::string(w4.name()), "int4");
  EXPECT_EQ(w4.group_size(), 128);
  EXPECT_EQ(w4.device_bytes(), 4u * 512 + 2 * 16 * 4 + 2 * 16);
}

}  // namespace
}  // namespace lw::test
