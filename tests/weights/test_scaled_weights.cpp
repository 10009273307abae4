// 8-bit weights with scales (FP8 E4M3 and INT8) from a safetensors checkpoint that
// make_fixtures.py quantised (ml_dtypes' e4m3fn, the published scale rules): every scale layout
// the loader reads (one, one per row, one per block with partial blocks, f32 and bf16 scales),
// kept 8-bit and expanded exactly to the reference values; shards on and off block edges;
// stacked parts; linear against a float64 reference; and the refusals (no scale, a NaN value,
// a NaN scale, scales of the wrong block shape).
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/quant/fp8.h"
#include "model/weight_loader.h"
#include "ops/weight.h"
#include "test_util.h"
#include "weights/checkpoint.h"
#include "weights/fixture_values.h"
#include "weights/weight_values.h"
#include "weights/load.h"

namespace lw::test {
namespace {

const std::string kDir = LW_WEIGHTS_FIXTURES;
constexpr int64_t kBlock = 32;  // make_fixtures.py's FP8_BLOCK

struct Fixture : FixtureCheckpoint {
  Fixture() : FixtureCheckpoint(kDir, "st_scaled") {}
};

// A loader that keeps 8-bit weights (LW_WEIGHT_STORAGE=quantized; the host target's default
// expands them at load), or expands them (storage "dense").
std::unique_ptr<model::WeightLoader> loader(const weights::Checkpoint& ckpt, bool dry = false,
                                            const char* storage = "quantized") {
  ScopedEnv env("LW_WEIGHT_STORAGE", storage);
  auto ld = std::make_unique<model::WeightLoader>(ctx(), &ckpt, DType::f32, dry);
  ld->set_quantization({"fp8", kBlock, kBlock});
  return ld;
}

double e4m3(int b) {  // e4m3fn from its definition: bias 7, subnormals below exponent 1
  const int e = (b >> 3) & 15, m = b & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (b & 0x80) ? -mag : mag;
}

TEST(ScaledWeights, Fp8DecodesEveryCode) {
  // Every code as the definition says; 0x7F / 0xFF NaN.
  for (int b = 0; b < 256; ++b) {
    const float got = kernels::fp8_e4m3_to_float(static_cast<uint8_t>(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(got) && kernels::fp8_e4m3_is_nan(static_cast<uint8_t>(b))) << b;
    } else {
      EXPECT_EQ(got, e4m3(b)) << "code " << b;
      EXPECT_FALSE(kernels::fp8_e4m3_is_nan(static_cast<uint8_t>(b)));
    }
  }
  EXPECT_EQ(kernels::fp8_e4m3_to_float(0x7E), 448.0f);
}

// Rows of 37 bytes (no 16-byte runs: the expansion's element-wise path) and partial 2 x 16
// scale blocks, every finite code, against the definition.
TEST(ScaledWeights, ExpansionOfUnalignedRows) {
  const int64_t n = 5, k = 37;
  Tensor q = Tensor::empty_host({n, k}, DType::i8), s = Tensor::empty_host({3, 3}, DType::f32);
  for (int64_t i = 0; i < n * k; ++i) {
    int code = static_cast<int>((i * 37) % 256);
    if ((code & 0x7F) == 0x7F) code ^= 1;  // not a NaN
    q.data<int8_t>()[i] = static_cast<int8_t>(code);
  }
  const Tensor sh = random_host({3, 3}, DType::f32, 0.5, 2.0);
  const ops::Weight w = ops::Weight::fp8_per_block(ctx().to_device(q), ctx().to_device(sh), {2, 16});
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor got = ctx().to_host(ops::expand(ctx(), w, dt));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) {
        const float want = static_cast<float>(e4m3(static_cast<uint8_t>(q.data<int8_t>()[i * k + j]))) *
                           sh.data<float>()[(i / 2) * 3 + j / 16];
        ASSERT_EQ(element(got, i * k + j), rounded_to(want, dt)) << dtype_name(dt) << " [" << i << ", " << j << "]";
      }
  }
}

TEST(ScaledWeights, EveryScaleLayoutLoadsToTheReferenceValues) {
  Fixture fx;
  auto ld = loader(*fx.ckpt);
  const std::pair<const char*, ops::WeightFormat> cases[] = {
      {"block.weight", ops::WeightFormat::fp8_e4m3_per_block},
      {"tensor.weight", ops::WeightFormat::fp8_e4m3_per_tensor},
      {"tensor1.weight", ops::WeightFormat::fp8_e4m3_per_tensor},
      {"channel.weight", ops::WeightFormat::fp8_e4m3_per_channel},
      {"int8.weight", ops::WeightFormat::int8_per_channel},
      {"int8t.weight", ops::WeightFormat::int8_per_channel},
  };
  for (const auto& [name, format] : cases) {
    SCOPED_TRACE(name);
    const weights::TensorRecord& rec = fx.ckpt->get(name);
    const int64_t n = rec.shape[0], k = rec.shape[1];
    const ops::Weight w = ld->get_weight(name, rec.shape);
    EXPECT_EQ(w.format(), format);
    EXPECT_EQ(w.data().nbytes(), static_cast<size_t>(n * k));  // one byte per value on the device
    expect_kept_and_dense(w, loader(*fx.ckpt, false, "dense")->get_weight(name, rec.shape), fx.values(name));
  }
}

// 8-bit matrices the model takes as plain tensors (MoE experts, which run as one grouped GEMM):
// expanded to the model dtype at load, exactly the reference values, whole or a shard's part;
// the dry run counts the expanded bytes.
TEST(ScaledWeights, TensorsOutsideTheProjectionsAreExpandedAtLoad) {
  Fixture fx;
  for (const char* name : {"block.weight", "channel.weight", "int8.weight"}) {
    SCOPED_TRACE(name);
    auto ld = loader(*fx.ckpt);
    const weights::TensorRecord& rec = fx.ckpt->get(name);
    const int64_t n = rec.shape[0], k = rec.shape[1];
    const std::vector<float> ref = fx.values(name);
    const Tensor whole = ctx().to_host(ld->get(name, rec.shape));
    ASSERT_EQ(whole.dtype(), DType::f32);
    for (int64_t i = 0; i < n * k; ++i) ASSERT_EQ(whole.data<float>()[i], ref[i]) << "element " << i;
    const Tensor rows = ctx().to_host(ld->get(name, rec.shape, {0, 1, n - 1}));
    for (int64_t i = 0; i < (n - 2) * k; ++i) ASSERT_EQ(rows.data<float>()[i], ref[k + i]) << "row element " << i;
    auto dry = loader(*fx.ckpt, true);
    dry->get(name, rec.shape);
    EXPECT_EQ(dry->bytes(), static_cast<size_t>(n * k) * sizeof(float));
  }
  auto ld = loader(*fx.ckpt);
  expect_error([&] { ld->get("noscale.weight", {8, 16}); }, "has no scale for it");
}

// Tensor-parallel shares: rows and columns on block edges stay 8-bit with their scales' share;
// a share that cuts blocks is expanded; the dry run counts the bytes the real load takes.
TEST(ScaledWeights, ShardsKeepTheirScales) {
  Fixture fx;
  const weights::TensorRecord& rec = fx.ckpt->get("block.weight");
  const int64_t n = rec.shape[0], k = rec.shape[1];  // 72 x 80: blocks of 32 with partial edges
  const std::vector<float> ref = fx.values("block.weight");
  using Part = model::WeightLoader::Part;
  const std::tuple<Part, ops::WeightFormat> cases[] = {
      {Part{0, 32, 72}, ops::WeightFormat::fp8_e4m3_per_block},  // rows: the last share is partial
      {Part{1, 0, 64}, ops::WeightFormat::fp8_e4m3_per_block},   // columns on block edges
      {Part{1, 64, 80}, ops::WeightFormat::fp8_e4m3_per_block},
      {Part{0, 10, 40}, ops::WeightFormat::dense},  // cuts blocks: expanded
      {Part{1, 40, 80}, ops::WeightFormat::dense},
  };
  for (const auto& [part, format] : cases) {
    SCOPED_TRACE(::testing::Message() << "dim " << part.dim << " [" << part.start << ", " << part.end << ")");
    auto dry = loader(*fx.ckpt, true);
    dry->get_weight("block.weight", rec.shape, part);
    auto ld = loader(*fx.ckpt);
    const ops::Weight w = ld->get_weight("block.weight", rec.shape, part);
    EXPECT_EQ(w.format(), format);
    EXPECT_EQ(dry->bytes(), ld->bytes());
    EXPECT_EQ(ld->bytes(), w.device_bytes());
    if (part.dim == 0) expect_values(w, ref, k, part.start, part.end, 0, k);
    else expect_values(w, ref, k, 0, n, part.start, part.end);
  }
  // Per-row scales split with their rows.
  auto ld = loader(*fx.ckpt);
  const ops::Weight rows = ld->get_weight("channel.weight", {40, 48}, Part{0, 8, 24});
  // Weight-only int8 (no int8 activations in the config) is expanded: its linear must not
  // quantise the activations.
  auto w8a16 = loader(*fx.ckpt);
  w8a16->set_quantization({"compressed-tensors", 0, 0, false});
  const ops::Weight int8 = w8a16->get_weight("int8.weight", {24, 48});
  EXPECT_EQ(int8.format(), ops::WeightFormat::dense);
  expect_values(int8, fx.values("int8.weight"), 48, 0, 24, 0, 48);
  EXPECT_EQ(rows.format(), ops::WeightFormat::fp8_e4m3_per_channel);
  expect_values(rows, fx.values("channel.weight"), 48, 8, 24, 0, 48);
}

// Stacked parts (fused q/k/v, gate/up): FP8 with one scale and per-row scales become one
// per-row FP8 weight, int8 parts one int8 weight; mixed 8-bit kinds are expanded.
TEST(ScaledWeights, StackedPartsKeepEightBits) {
  Fixture fx;
  auto run = [&](const std::vector<std::string>& names, ops::WeightFormat want) {
    SCOPED_TRACE(want == ops::WeightFormat::dense ? "dense" : ops::weight_format_name(want));
    auto dry = loader(*fx.ckpt, true);
    std::vector<ops::Weight> dry_parts;
    for (const std::string& name : names) dry_parts.push_back(dry->get_weight(name, fx.ckpt->get(name).shape));
    dry->fuse_weights(dry_parts);
    auto ld = loader(*fx.ckpt);
    std::vector<ops::Weight> parts;
    std::vector<float> ref;
    for (const std::string& name : names) {
      parts.push_back(ld->get_weight(name, fx.ckpt->get(name).shape));
      const std::vector<float> v = fx.values(name);
      ref.insert(ref.end(), v.begin(), v.end());
    }
    const ops::Weight w = ld->fuse_weights(parts);
    EXPECT_EQ(w.format(), want);
    EXPECT_EQ(dry->bytes(), ld->bytes());
    expect_values(w, ref, 48, 0, w.out_features(), 0, 48);
  };
  run({"tensor.weight", "channel.weight", "tensor1.weight"}, ops::WeightFormat::fp8_e4m3_per_channel);
  run({"int8.weight", "int8t.weight"}, ops::WeightFormat::int8_per_channel);
  run({"tensor.weight", "int8.weight"}, ops::WeightFormat::dense);
}

// linear over each kind against float64 over the reference values: FP8 as W8A16 (the fused GEMV
// at 1 row and 9 = two passes, the expansion and the tiled GEMM at 7: paths every target has; the
// W8A8 FP8 GEMM is tested in test_weight; the GEMV also over x off a vector boundary, bit for bit
// the aligned x's), int8 as W8A8 (x quantised per token: bounded by its rounding).
TEST(ScaledWeights, LinearMatchesTheFloat64Reference) {
  Fixture fx;
  auto ld = loader(*fx.ckpt);
  for (const char* name : {"block.weight", "tensor.weight", "channel.weight", "int8.weight"}) {
    const weights::TensorRecord& rec = fx.ckpt->get(name);
    const int64_t n = rec.shape[0], k = rec.shape[1];
    const ops::Weight w = ld->get_weight(name, rec.shape);
    const std::vector<float> ref = fx.values(name);
    const bool int8 = w.format() == ops::WeightFormat::int8_per_channel;
    for (DType dt : {DType::f32, DType::bf16})
      for (const auto& [m, path] : {std::pair{int64_t{1}, ops::GemmPath::gemv}, std::pair{int64_t{7}, ops::GemmPath::tiled},
                                    std::pair{int64_t{9}, ops::GemmPath::gemv}}) {
        if (int8 && path == ops::GemmPath::gemv) continue;  // W8A8 has no gemv path
        SCOPED_TRACE(::testing::Message() << name << " " << dtype_name(dt) << " M=" << m << " " << ops::gemm_path_name(path));
        const Tensor xh = random_host({m, k}, dt), bh = random_host({n}, dt);
        Tensor out = ctx().empty({m, n}, dt);
        poison(out);
        const Tensor x = ctx().to_device(xh), bias = ctx().to_device(bh);
        ops::linear(ctx(), x, w, bias, out, path);
        const Tensor got = ctx().to_host(out);
        if (path == ops::GemmPath::gemv) {  // x off the vector boundary: copied first, the same bits
          Tensor shifted_out = ctx().empty({m, n}, dt);
          ops::linear(ctx(), offset_copy(x), w, bias, shifted_out, path);
          EXPECT_TRUE(bitwise_equal(ctx().to_host(shifted_out), got));
        }
        for (int64_t i = 0; i < m; ++i) {
          double xmax = 0;
          for (int64_t l = 0; l < k; ++l) xmax = std::max(xmax, std::abs(element(xh, i * k + l)));
          for (int64_t j = 0; j < n; ++j) {
            double want = element(bh, j), mag = std::abs(want), wsum = 0;
            for (int64_t l = 0; l < k; ++l) {
              const double wv = int8 ? ref[j * k + l] : rounded_to(ref[j * k + l], dt);
              want += element(xh, i * k + l) * wv;
              mag += std::abs(element(xh, i * k + l) * wv);
              wsum += std::abs(wv);
            }
            // fp32 accumulation and the output's rounding; int8 adds x's rounding to 1/127 of its
            // row maximum, half a step per term.
            const double bound = epsilon(dt) * (std::abs(want) + mag) + k * std::ldexp(1.0, -24) * mag +
                                 (int8 ? 0.5 * xmax / 127.0 * wsum : 0.0) + 1e-6;
            ASSERT_LE(std::abs(element(got, i * n + j) - want), bound) << "element [" << i << ", " << j << "]";
          }
        }
      }
  }
}

TEST(ScaledWeights, BadCheckpointsAreRefusedByName) {
  Fixture fx;
  auto ld = loader(*fx.ckpt);
  expect_error([&] { ld->get_weight("noscale.weight", {8, 16}); },
               "is F8_E4M3 but the checkpoint has no scale for it ('noscale.weight_scale_inv' or 'noscale.weight_scale')");
  expect_error([&] { ld->get_weight("nan.weight", {8, 16}); }, "element 53 (row 3, column 5) is an FP8 NaN");
  expect_error([&] { ld->get_weight("nanscale.weight", {8, 16}); }, "scale 0 of 'nanscale.weight_scale' is nan");
  expect_error([&] { ld->get_weight("badblock.weight", {8, 16}); },
               "its scales 'badblock.weight_scale_inv' [5, 5] do not match blocks of 32 x 32 over [8, 16] ([1, 1])");
  ScopedEnv env("LW_WEIGHT_STORAGE", "quantized");
  model::WeightLoader no_block(ctx(), fx.ckpt.get(), DType::f32, false);
  expect_error([&] { no_block.get_weight("block.weight", {72, 80}); }, "has no weight block size");
  // A bare FP8 tensor is no plain float tensor.
  expect_error([&] { weights::load_tensor(ctx(), fx.ckpt->get("tensor.weight"), DType::f32); },
               "is F8_E4M3: FP8 values mean nothing without their scales");
}

}  // namespace
}  // namespace lw::test
