// int8 quantisation per token and per group, FP8 E4M3 activation quantisation (the encoder
// against the nearest code by search), the expansion of GGML blocks (ops::dequantize),
// and the row / whole-tensor reductions, against references: exact agreement with the float
// formula, and |x - q*s| <= s/2 in float64.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/quant/fp8.h"
#include "ops/quant.h"
#include "ops/reduce.h"
#include "test_util.h"

namespace lw::test {
namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// x with one all-zero row (row 1 when there are two or more), as a device tensor; a
// misaligned view (one element past a fresh allocation) when `misalign`.
Tensor make_input(const Tensor& host, bool misalign) {
  if (!misalign) return ctx().to_device(host);
  Tensor flat = ctx().empty({host.numel() + 1}, host.dtype());
  Tensor view = flat.slice(0, 1, host.numel() + 1).view(host.shape());
  view.copy_from(host, ctx().stream().get());
  return view;
}

Tensor random_rows(int64_t rows, int64_t cols, DType dt) {
  Tensor h = random_host({rows, cols}, dt, -3, 3);
  if (rows > 1) {
    Tensor zero = random_host({1, cols}, dt, 0, 0);
    std::memcpy(static_cast<char*>(h.data_ptr()) + cols * dtype_size(dt), zero.data_ptr(), cols * dtype_size(dt));
  }
  return h;
}

// Checks q and scales for spans of `span` consecutive elements (a row or a group).
void check_quantized(const Tensor& xh, const Tensor& q, const Tensor& scales, int64_t span) {
  const std::vector<double> x = to_doubles(xh);
  const int8_t* qv = q.data<int8_t>();
  const float* sv = scales.data<float>();
  for (int64_t g = 0; g < static_cast<int64_t>(x.size()) / span; ++g) {
    float amax = 0;
    for (int64_t i = g * span; i < (g + 1) * span; ++i) amax = std::max(amax, static_cast<float>(std::abs(x[i])));
    ASSERT_EQ(sv[g], amax / 127.0f) << "scale of span " << g;
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    for (int64_t i = g * span; i < (g + 1) * span; ++i) {
      const float r = std::rint(static_cast<float>(x[i]) * inv);
      ASSERT_EQ(qv[i], static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f))) << "element " << i;
      // Half a step, plus the float rounding of x * inv (two roundings of a value <= 127 in
      // magnitude: 127 * 2^-23 steps) that can move a value sitting on a half step.
      ASSERT_LE(std::abs(x[i] - qv[i] * static_cast<double>(sv[g])), sv[g] * (0.5 + 127.0 * 0x1p-23)) << "element " << i;
    }
  }
}

TEST(Quant, PerTokenQuantiseAndDequantise) {
  for (DType dt : kFloatTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {4, 64}, {5, 1000}, {2, 4096}, {3, 5003}}) {
      for (bool misalign : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", " << rows << "x" << cols << (misalign ? ", misaligned" : ""));
        Tensor xh = random_rows(rows, cols, dt);
        Tensor q = ctx().empty({rows, cols}, DType::i8), s = ctx().empty({rows}, DType::f32);
        poison(q);
        poison(s);
        ops::quantize_per_token(ctx(), make_input(xh, misalign), q, s);
        Tensor qh = ctx().to_host(q), sh = ctx().to_host(s);
        check_quantized(xh, qh, sh, cols);
        Tensor back = ctx().empty({rows, cols}, dt);
        poison(back);
        ops::dequantize_per_token(ctx(), q, s, back);
        std::vector<double> want;
        for (int64_t i = 0; i < rows * cols; ++i) want.push_back(qh.data<int8_t>()[i] * static_cast<double>(sh.data<float>()[i / cols]));
        EXPECT_TRUE(all_close(ctx().to_host(back), want, epsilon(dt), 0));
      }
    }
  }
}

// Past the row plan's 2^17 vectors (kernels/row_plan.h) threads take several vectors each; the
// cases above take one.
TEST(Quant, PerTokenQuantiseManyRows) {
  const int64_t rows = 140, cols = 8192;
  Tensor xh = random_rows(rows, cols, DType::bf16);
  Tensor q = ctx().empty({rows, cols}, DType::i8), s = ctx().empty({rows}, DType::f32);
  poison(q);
  poison(s);
  ops::quantize_per_token(ctx(), ctx().to_device(xh), q, s);
  check_quantized(xh, ctx().to_host(q), ctx().to_host(s), cols);
}

TEST(Quant, PerGroupQuantiseAndDequantise) {
  for (DType dt : kFloatTypes) {
    for (int group : {32, 64, 128}) {
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 128}, {3, 384}, {7, 1024}}) {
        for (bool misalign : {false, true}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", group " << group << ", " << rows << "x" << cols
                                            << (misalign ? ", misaligned" : ""));
          Tensor xh = random_rows(rows, cols, dt);
          Tensor q = ctx().empty({rows, cols}, DType::i8), s = ctx().empty({rows, cols / group}, DType::f32);
          poison(q);
          poison(s);
          ops::quantize_per_group(ctx(), make_input(xh, misalign), group, q, s);
          Tensor qh = ctx().to_host(q), sh = ctx().to_host(s);
          check_quantized(xh, qh, sh, group);
          Tensor back = ctx().empty({rows, cols}, dt);
          ops::dequantize_per_group(ctx(), q, s, group, back);
          std::vector<double> want;
          for (int64_t i = 0; i < rows * cols; ++i) want.push_back(qh.data<int8_t>()[i] * static_cast<double>(sh.data<float>()[i / group]));
          EXPECT_TRUE(all_close(ctx().to_host(back), want, epsilon(dt), 0));
        }
      }
    }
  }
}

TEST(Quant, RejectsMisuse) {
  Tensor x = ctx().empty({4, 96}, DType::bf16), q = ctx().empty({4, 96}, DType::i8);
  Tensor s_tok = ctx().empty({4}, DType::f32), s_grp = ctx().empty({4, 3}, DType::f32);
  EXPECT_THROW(ops::quantize_per_token(ctx(), x, ctx().empty({4, 96}, DType::i32), s_tok), Error);
  EXPECT_THROW(ops::quantize_per_token(ctx(), x, q, ctx().empty({5}, DType::f32)), Error);
  EXPECT_THROW(ops::quantize_per_group(ctx(), x, 48, q, s_grp), Error);   // unsupported group
  EXPECT_THROW(ops::quantize_per_group(ctx(), x, 64, q, s_grp), Error);   // 64 does not divide 96
  EXPECT_NO_THROW(ops::quantize_per_group(ctx(), x, 32, q, s_grp));
}

// The e4m3fn code nearest to v by search over every finite code, ties to the even code;
// saturating at 448.
uint8_t nearest_e4m3(float v) {
  const double a = std::min(std::abs(static_cast<double>(v)), 448.0);
  int best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double d = std::abs(kernels::fp8_e4m3_to_float(static_cast<uint8_t>(c)) - a);
    const double bd = std::abs(kernels::fp8_e4m3_to_float(static_cast<uint8_t>(best)) - a);
    if (d < bd || (d == bd && c % 2 == 0)) best = c;
  }
  return static_cast<uint8_t>(best | (std::signbit(v) ? 0x80 : 0));
}

TEST(Quant, Fp8EncodeIsTheNearestCode) {
  std::vector<float> values = {0.0f, -0.0f, 448.0f, -448.0f, 460.0f, 1e30f, -1e30f, 0.015625f, 0.0137f, 0x1p-10f, 0x1p-9f,
                               0x3p-10f, 1.0625f, 1.1875f, 240.0f, 232.0f};
  for (int c = 0; c <= 0x7E; ++c) {  // every code, and the midpoints on either side of it
    const float v = kernels::fp8_e4m3_to_float(static_cast<uint8_t>(c));
    values.push_back(v);
    values.push_back(-v);
    if (c < 0x7E) {
      const float next = kernels::fp8_e4m3_to_float(static_cast<uint8_t>(c + 1));
      values.push_back(0.5f * (v + next));
      values.push_back(std::nextafter(0.5f * (v + next), 0.0f));
      values.push_back(std::nextafter(0.5f * (v + next), 1e9f));
    }
  }
  std::uniform_real_distribution<float> mag(-12.0f, 9.0f);
  for (int i = 0; i < 20000; ++i) values.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(mag(rng())));
  for (float v : values) {
    const uint8_t want = nearest_e4m3(v);
    ASSERT_EQ(kernels::fp8_e4m3_from_float(v), want) << "v = " << v;
  }
  EXPECT_EQ(kernels::fp8_e4m3_from_float(NAN) & 0x7F, 0x7F);
}

// The integer decode of the GEMV: every finite code at every byte position of a word, times
// 2^120, is the code's value (subnormals included).
TEST(Quant, Fp8WordDecodeIsExact) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    for (int i = 0; i < 4; ++i) {
      const uint32_t word = (0x5A3C7E01u & ~(0xFFu << (8 * i))) | (static_cast<uint32_t>(c) << (8 * i));
      ASSERT_EQ(kernels::fp8_e4m3_times_2_pow_minus_120(word, i) * 0x1p120f, kernels::fp8_e4m3_to_float(static_cast<uint8_t>(c)))
          << "code " << c << " at byte " << i;
    }
  }
}

TEST(Quant, Fp8QuantiseMatchesTheFormula) {
  for (DType dt : kFloatTypes) {
    for (auto [rows, cols, group] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 100, 100}, {5, 384, 128},
                                     {4, 4096, 4096}, {7, 1024, 128}, {2, 96, 32}}) {
      for (bool misalign : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", " << rows << "x" << cols << " group " << group
                                          << (misalign ? ", misaligned" : ""));
        Tensor xh = random_rows(rows, cols, dt);
        const int64_t ld = rows + 2;  // scale rows longer than the rows: the padded layout
        Tensor q = ctx().empty({rows, cols}, DType::i8), s = ctx().empty({cols / group, ld}, DType::f32);
        poison(q);
        poison(s);
        ops::quantize_fp8(ctx(), make_input(xh, misalign), group, q, s);
        const Tensor qh = ctx().to_host(q), sh = ctx().to_host(s);
        const std::vector<double> x = to_doubles(xh);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t g = 0; g < cols / group; ++g) {
            float amax = 0;
            for (int64_t i = r * cols + g * group; i < r * cols + (g + 1) * group; ++i)
              amax = std::max(amax, static_cast<float>(std::abs(x[i])));
            const float scale = sh.data<float>()[g * ld + r];
            ASSERT_EQ(scale, amax / 448.0f) << "scale of row " << r << " group " << g;
            const float inv = amax > 0 ? 448.0f / amax : 0.0f;
            for (int64_t i = r * cols + g * group; i < r * cols + (g + 1) * group; ++i) {
              const uint8_t code = static_cast<uint8_t>(qh.data<int8_t>()[i]);
              ASSERT_EQ(code, nearest_e4m3(static_cast<float>(x[i]) * inv)) << "element " << i;
              // e4m3 keeps 3 mantissa bits: half a step is 2^-4 of the value, 2^-10 x 448 below 2^-6.
              const double back = kernels::fp8_e4m3_to_float(code) * static_cast<double>(scale);
              ASSERT_LE(std::abs(back - x[i]), std::abs(x[i]) / 16.0 + scale * 0x1p-10 * 1.01) << "element " << i;
            }
          }
      }
    }
  }
  Tensor x = ctx().empty({2, 96}, DType::bf16), q = ctx().empty({2, 96}, DType::i8);
  EXPECT_THROW(ops::quantize_fp8(ctx(), x, 64, q, ctx().empty({1, 2}, DType::f32)), Error);  // 64 does not divide 96
  EXPECT_THROW(ops::quantize_fp8(ctx(), x, 32, q, ctx().empty({2, 3}, DType::f32)), Error);  // scales are group-major
}

// GGML blocks built on the host with random fields, expanded by ops::dequantize: each element
// is computed in fp32 as ggml does (q4_1: d * q + m, rounded after the product and the sum)
// and rounded once to the output type, so the expected values are exact.
TEST(Quant, DequantizeExpandsGgmlBlocksExactly) {
  std::uniform_int_distribution<int> byte(0, 255);
  auto put_half = [](uint8_t* p, float v) {
    const half h = gpu::from_float<half>(v);
    std::memcpy(p, &h, 2);
  };
  auto half_at = [](const uint8_t* p) {
    half h;
    std::memcpy(&h, p, 2);
    return gpu::to_float(h);
  };
  for (ops::BlockFormat format : {ops::BlockFormat::q8_0, ops::BlockFormat::q4_0, ops::BlockFormat::q4_1}) {
    for (DType dt : kFloatTypes) {
      SCOPED_TRACE(::testing::Message() << ops::block_format_name(format) << " -> " << dtype_name(dt));
      const int64_t blocks = 37, per = ops::block_format_elems(format), bytes = ops::block_format_bytes(format);
      Tensor raw = Tensor::empty_host({blocks * bytes}, DType::i8);
      auto* b = reinterpret_cast<uint8_t*>(raw.data_ptr());
      std::vector<double> want;
      for (int64_t i = 0; i < blocks; ++i) {
        uint8_t* blk = b + i * bytes;
        for (int64_t j = 0; j < bytes; ++j) blk[j] = static_cast<uint8_t>(byte(rng()));
        put_half(blk, static_cast<float>(random_host({1}, DType::f32, 0.001, 0.1).data<float>()[0]));
        if (format == ops::BlockFormat::q4_1) put_half(blk + 2, random_host({1}, DType::f32, -1, 1).data<float>()[0]);
        const float d = half_at(blk);
        for (int64_t j = 0; j < per; ++j) {
          float v = 0;
          if (format == ops::BlockFormat::q8_0) {
            v = static_cast<float>(static_cast<int8_t>(blk[2 + j])) * d;
          } else {
            const int off = format == ops::BlockFormat::q4_0 ? 2 : 4;
            const uint8_t q = j < per / 2 ? blk[off + j] & 0x0f : blk[off + j - per / 2] >> 4;
            if (format == ops::BlockFormat::q4_0) {
              v = static_cast<float>(q - 8) * d;
            } else {
              const float product = d * static_cast<float>(q);
              v = product + half_at(blk + 2);
            }
          }
          switch (dt) {
            case DType::f16: want.push_back(gpu::to_float(gpu::from_float<half>(v))); break;
            case DType::bf16: want.push_back(gpu::to_float(gpu::from_float<bfloat16>(v))); break;
            default: want.push_back(v);
          }
        }
      }
      Tensor out = ctx().empty({blocks, per}, dt);
      poison(out);
      ops::dequantize(ctx(), ctx().to_device(raw), format, out);
      EXPECT_TRUE(all_close(ctx().to_host(out), want, 0, 0));
    }
  }
}

TEST(Quant, DequantizeRejectsMisuse) {
  const Tensor out = ctx().empty({2, 32}, DType::f16);
  expect_error([&] { ops::dequantize(ctx(), ctx().empty({67}, DType::i8), ops::BlockFormat::q4_1, out); },
               "must be a contiguous i8[40]");
  expect_error([&] { ops::dequantize(ctx(), ctx().empty({68}, DType::i8), ops::BlockFormat::q8_0, ctx().empty({2, 31}, DType::f32)); },
               "not whole q8_0 blocks of 32");
  expect_error([&] { ops::dequantize(ctx(), ctx().empty({64}, DType::i32), ops::BlockFormat::f32, ctx().empty({64}, DType::f32)); },
               "must be a contiguous i8[256]");
  expect_error([&] { ops::dequantize(ctx(), ctx().empty({72}, DType::i8), ops::BlockFormat::q4_0, ctx().empty({64}, DType::i32)); },
               "must be f32, f16 or bf16");
}

TEST(Reduce, RowAndTensorReductionsEveryOp) {
  const std::pair<ops::Reduce, const char*> reductions[] = {
      {ops::Reduce::sum, "sum"}, {ops::Reduce::max, "max"}, {ops::Reduce::min, "min"}, {ops::Reduce::absmax, "absmax"}};
  for (DType dt : kFloatTypes) {
    for (auto [op, name] : reductions) {
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 33}, {5, 1000}, {2, 20001}}) {
        SCOPED_TRACE(::testing::Message() << name << ", " << dtype_name(dt) << ", " << rows << "x" << cols);
        Tensor xh = random_host({rows, cols}, dt, -5, 4);
        Tensor x = ctx().to_device(xh), out = ctx().empty({rows}, DType::f32), all = ctx().empty({1}, DType::f32);
        poison(out);
        poison(all);
        ops::row_reduce(ctx(), op, x, out);
        ops::tensor_reduce(ctx(), op, x, all);
        const std::vector<double> v = to_doubles(xh);
        auto fold = [&](int64_t begin, int64_t end) {
          double acc = op == ops::Reduce::sum || op == ops::Reduce::absmax ? 0 : op == ops::Reduce::max ? -INFINITY : INFINITY;
          for (int64_t i = begin; i < end; ++i) {
            const double e = op == ops::Reduce::absmax ? std::abs(v[i]) : v[i];
            acc = op == ops::Reduce::sum ? acc + e : op == ops::Reduce::min ? std::min(acc, e) : std::max(acc, e);
          }
          return acc;
        };
        std::vector<double> want_rows;
        for (int64_t r = 0; r < rows; ++r) want_rows.push_back(fold(r * cols, (r + 1) * cols));
        // Sums accumulate float rounding over up to 7e4 terms of magnitude <= 5.
        const double abs = op == ops::Reduce::sum ? 1e-6 * static_cast<double>(cols) : 0;
        EXPECT_TRUE(all_close(ctx().to_host(out), want_rows, 0, abs));
        EXPECT_TRUE(all_close(ctx().to_host(all), {fold(0, rows * cols)}, 0, abs * static_cast<double>(rows)));
        Tensor first = ctx().to_host(all);
        ops::tensor_reduce(ctx(), op, x, all);
        EXPECT_TRUE(bitwise_equal(first, ctx().to_host(all)));
      }
    }
  }
}

}  // namespace
}  // namespace lw::test
