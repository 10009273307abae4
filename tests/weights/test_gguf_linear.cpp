// linear over GGUF block weights kept in their blocks (ops::Weight::gguf): every block format of
// make_fixtures.py's linear.gguf (written and dequantised by the gguf package) against a float64
// reference over gguf's dequantised values, on the fused GEMV (one and several passes over the
// weights) and the expand-then-GEMM paths, in each float dtype; and the loader's handling of a
// real model's blocks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gpu/vector.h"
#include "kernels/quant/gguf_gemv.h"
#include "kernels/quant/gguf_mma_gemv.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/weight.h"
#include "test_util.h"
#include "weights/fixture_values.h"
#include "weights/checkpoint.h"
#include "weights/load.h"
#include "weights/random_blocks.h"

namespace lw::test {
namespace {

const std::string kDir = LW_WEIGHTS_FIXTURES;

// Random blocks of `type` for a [n, k] matrix (weights::random_blocks), on the device.
ops::Weight random_gguf_weight(weights::FileDType type, int64_t n, int64_t k, uint64_t seed) {
  const std::vector<std::byte> raw = weights::random_blocks(type, n, k, seed);
  Tensor h = Tensor::empty_host({static_cast<int64_t>(raw.size())}, DType::i8);
  std::memcpy(h.data_ptr(), raw.data(), raw.size());
  return ops::Weight::gguf(*ops::gguf_weight_format(*weights::block_format(type)), n, k, ctx().to_device(h));
}

ops::Weight gguf_weight(const weights::TensorRecord& rec) {
  const kernels::BlockFormat block = *weights::block_format(rec.dtype);
  const int64_t n = rec.shape[0], k = rec.shape[1];
  const int64_t row_bytes = k / kernels::block_format_elems(block) * kernels::block_format_bytes(block);
  return ops::Weight::gguf(*ops::gguf_weight_format(block), n, k, weights::load_raw(ctx(), rec, 0, n, 0, row_bytes));
}

TEST(GgufLinear, EveryFormatMatchesTheFloat64Reference) {
  std::ifstream mf(kDir + "/manifest.json");
  ASSERT_TRUE(mf.good()) << "run the weights.make_fixtures test first (ctest -L weights)";
  const nlohmann::json manifest = nlohmann::json::parse(mf)["linear.gguf"];
  const std::unique_ptr<weights::Checkpoint> ckpt = weights::open_checkpoint(kDir + "/linear.gguf");
  struct Case {
    int64_t m;
    ops::GemmPath path;
  };
  // Automatic: the fused GEMV up to kGgufGemvMaxRows rows (kGgufMmaGemvMaxRows on matrix
  // fragments), the expansion above; forced: the GEMV
  // at 9 and 33 rows (two and five passes over the weights), the expansion and the tiled GEMM at 3.
  const Case cases[] = {{1, ops::GemmPath::automatic}, {4, ops::GemmPath::automatic}, {20, ops::GemmPath::automatic},
                        {9, ops::GemmPath::gemv},      {33, ops::GemmPath::gemv},      {3, ops::GemmPath::tiled}};
  ASSERT_EQ(manifest.size(), 10u);
  for (const auto& [name, info] : manifest.items()) {
    const weights::TensorRecord& rec = ckpt->get(name);
    const ops::Weight w = gguf_weight(rec);
    const int64_t n = w.out_features(), k = w.in_features();
    EXPECT_EQ(w.device_bytes(), rec.bytes);
    const std::vector<float> wref = read_values<float>(kDir + "/" + info["expected"].get<std::string>());
    ASSERT_EQ(static_cast<int64_t>(wref.size()), n * k);
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (const Case& c : cases) {
        const bool with_bias = c.m % 2 == 1 || c.m == 20;
        SCOPED_TRACE(::testing::Message() << name << " " << dtype_name(dt) << " M=" << c.m << " "
                                          << ops::gemm_path_name(c.path) << (with_bias ? " bias" : ""));
        const Tensor xh = random_host({c.m, k}, dt);
        const Tensor bh = random_host({n}, dt);
        Tensor out = ctx().empty({c.m, n}, dt);
        poison(out);
        ops::linear(ctx(), ctx().to_device(xh), w, with_bias ? ctx().to_device(bh) : Tensor(), out, c.path);
        const Tensor got = ctx().to_host(out);
        // The weights are gguf's values rounded to dt, except on the GEMV of the matrix-fragment
        // layer (f16 and bf16 x, every format), which scales each
        // sub-block's sums in fp32 and so uses them unrounded; fp32 accumulation over K terms
        // (each within 2^-24 relative, K * 2^-24 in all of sum |x w|), one rounding to dt at the
        // end, and with a bias one more of the product (cuBLASLt's bias epilogue, ops/gemm.h).
        const bool fragments = dt != DType::f32;
        const bool narrow = name == "w.q4_0" || name == "w.q5_0" || name == "w.q8_0";
        const int64_t most_rows = !fragments ? ops::kGgufGemvMaxRows
                                  : narrow   ? ops::kGgufMmaGemvMaxRowsNarrowLoads
                                             : ops::kGgufMmaGemvMaxRows;
        const bool exact = fragments && (c.path == ops::GemmPath::gemv || (c.path == ops::GemmPath::automatic && c.m <= most_rows));
        const double eps = epsilon(dt), acc_eps = static_cast<double>(k) * std::ldexp(1.0, -24);
        for (int64_t i = 0; i < c.m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double ref = with_bias ? element(bh, j) : 0.0, mag = std::abs(ref);
            for (int64_t l = 0; l < k; ++l) {
              const double p = element(xh, i * k + l) * (exact ? wref[j * k + l] : rounded_to(wref[j * k + l], dt));
              ref += p;
              mag += std::abs(p);
            }
            const double v = element(got, i * n + j);
            const double product = with_bias ? ref - element(bh, j) : 0.0;
            ASSERT_LE(std::abs(v - ref), eps * (std::abs(ref) + std::abs(product)) + acc_eps * mag + 1e-6)
                << "element [" << i << ", " << j << "]: " << v << " vs " << ref;
          }
      }
    // The expansion is gguf's dequantisation, rounded once.
    const Tensor dense = ctx().to_host(ops::expand(ctx(), w, DType::f32));
    for (int64_t i = 0; i < n * k; ++i) ASSERT_EQ(dense.data<float>()[i], wref[i]) << name << " element " << i;
    // The same blocks 2 bytes past a 16-byte boundary (the decoders' byte-by-byte loads where a
    // block's 16-byte fields are not 16-aligned).
    const Tensor raw = w.data().view({w.data().numel()});
    Tensor shifted = ctx().empty({raw.numel() + 2}, raw.dtype()).slice(0, 2, raw.numel() + 2);
    shifted.copy_from(raw, ctx().stream().get());
    const ops::Weight moved = ops::Weight::gguf(w.format(), n, k, shifted);
    const Tensor dense_moved = ctx().to_host(ops::expand(ctx(), moved, DType::f32));
    for (int64_t i = 0; i < n * k; ++i)
      ASSERT_EQ(dense_moved.data<float>()[i], wref[i]) << name << " element " << i << " (unaligned)";
  }
}

// Row p of x the unit vector e_p, so that row p of the result is column p of W: every weight seen
// in its place, on the GEMV of each format in f16 and bf16 (a kernel that pairs a weight with
// the wrong element of x or a sub-block with the wrong scale fails here, where sums over random x
// can hide it within their bound). The SIMT GEMV gives each weight rounded to dt; the K-quant GEMV
// on matrix fragments gguf's fp32 value formed in its own order (one fp32 rounding apart), rounded
// to dt: within one unit in dt's last place.
TEST(GgufLinear, UnitRowsOfXGiveEveryWeightInPlace) {
  std::ifstream mf(kDir + "/manifest.json");
  ASSERT_TRUE(mf.good()) << "run the weights.make_fixtures test first (ctest -L weights)";
  const nlohmann::json manifest = nlohmann::json::parse(mf)["linear.gguf"];
  const std::unique_ptr<weights::Checkpoint> ckpt = weights::open_checkpoint(kDir + "/linear.gguf");
  for (const auto& [name, info] : manifest.items()) {
    const ops::Weight w = gguf_weight(ckpt->get(name));
    const int64_t n = w.out_features(), k = w.in_features();
    const std::vector<float> wref = read_values<float>(kDir + "/" + info["expected"].get<std::string>());
    Tensor eye = Tensor::empty_host({k, k}, DType::f32);
    std::fill_n(eye.data<float>(), k * k, 0.0f);
    for (int64_t p = 0; p < k; ++p) eye.data<float>()[p * k + p] = 1.0f;
    const Tensor eye_device = ctx().to_device(eye);
    for (DType dt : {DType::f16, DType::bf16}) {
      SCOPED_TRACE(::testing::Message() << name << " " << dtype_name(dt));
      Tensor x = ctx().empty({k, k}, dt), out = ctx().empty({k, n}, dt);
      ops::cast(ctx(), eye_device, x);
      poison(out);
      ops::linear(ctx(), x, w, Tensor(), out, ops::GemmPath::gemv);
      const Tensor got = ctx().to_host(out);
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) {
          const double want = wref[j * k + p], v = element(got, p * n + j);
          ASSERT_LE(std::abs(v - want), 2.0 * epsilon(dt) * std::abs(want) + 1e-7) << "weight [" << j << ", " << p << "]";
        }
    }
  }
}

// The fragment GEMV's block plans, each against the float64 sum over gguf's values (the
// expansion in f32, checked equal to them above): the 32-element formats load 8 blocks at a time
// (K of 9 and 25 blocks leave single blocks after the groups of a warp's slice, and slices of
// unequal length; K of 42 blocks gives slices that begin at odd blocks, which Q4_0's, Q5_0's and
// Q8_0's 4-byte loads by the block's parity take alone); Q6_K and Q3_K read 4 bytes at a time in
// every other super-block where the rows start 4-aligned (K of 4 super-blocks) and 2 at a time
// elsewhere (K of 3 and 5: rows 2 bytes past); Q2_K 4 at a time everywhere. K of 17
// super-blocks gives the warps of a row tile slices of 3, 2 and no super-blocks (the smaller K
// give each warp one at most), for the passes of one row and of several: one row of x loads a
// slice's next super-block ahead (an odd and an even count, and an empty slice).
TEST(GgufLinear, EveryBlockAlignmentAndPartialGroup) {
  const int64_t n = 19;
  std::vector<std::pair<weights::FileDType, int64_t>> cases;
  for (weights::FileDType type :
       {weights::FileDType::q4_0, weights::FileDType::q4_1, weights::FileDType::q5_0, weights::FileDType::q5_1,
        weights::FileDType::q8_0})
    for (int64_t k : {288, 800, 1344}) cases.emplace_back(type, k);
  for (weights::FileDType type : {weights::FileDType::q6_k, weights::FileDType::q3_k, weights::FileDType::q2_k})
    for (int64_t k : {768, 1024, 1280}) cases.emplace_back(type, k);
  for (weights::FileDType type : {weights::FileDType::q2_k, weights::FileDType::q3_k, weights::FileDType::q4_k,
                                  weights::FileDType::q5_k, weights::FileDType::q6_k})
    cases.emplace_back(type, 17 * 256);
  for (const auto& [type, k] : cases) {
    const ops::Weight w = random_gguf_weight(type, n, k, 5);
    const Tensor wref = ctx().to_host(ops::expand(ctx(), w, DType::f32));
    for (DType dt : {DType::f16, DType::bf16})
      for (int64_t m : {1, 9}) {
        SCOPED_TRACE(::testing::Message() << w.describe() << " " << dtype_name(dt) << " M=" << m);
        const Tensor xh = random_host({m, k}, dt);
        Tensor out = ctx().empty({m, n}, dt);
        poison(out);
        ops::linear(ctx(), ctx().to_device(xh), w, Tensor(), out, ops::GemmPath::gemv);
        const Tensor got = ctx().to_host(out);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0.0, mag = 0.0;
            for (int64_t l = 0; l < k; ++l) {
              const double p = element(xh, i * k + l) * wref.data<float>()[j * k + l];
              ref += p;
              mag += std::abs(p);
            }
            ASSERT_LE(std::abs(element(got, i * n + j) - ref),
                      epsilon(dt) * std::abs(ref) + static_cast<double>(k) * std::ldexp(1.0, -24) * mag + 1e-6)
                << "element [" << i << ", " << j << "]";
          }
      }
  }
}

// Deterministic mode: one summation order for every M, so a row's result does not depend on
// how many rows share the call.
TEST(GgufLinear, DeterministicRowsDoNotDependOnTheBatch) {
  DeterministicScope det(ctx());
  const std::unique_ptr<weights::Checkpoint> ckpt = weights::open_checkpoint(kDir + "/linear.gguf");
  const ops::Weight w = gguf_weight(ckpt->get("w.q4_k"));
  const int64_t n = w.out_features(), k = w.in_features();
  const Tensor x = ctx().to_device(random_host({24, k}, DType::bf16));
  Tensor all = ctx().empty({24, n}, DType::bf16), one = ctx().empty({1, n}, DType::bf16);
  ops::linear(ctx(), x, w, Tensor(), all);
  ops::linear(ctx(), x.slice(0, 5, 6), w, Tensor(), one);
  EXPECT_TRUE(bitwise_equal(ctx().to_host(one), ctx().to_host(all.slice(0, 5, 6))));
}

// MoE experts kept in one block format: grouped_linear runs every expert's rows in one launch
// that reads the offsets on the device (no copy to the host), each expert's rows bit for bit as
// linear's GEMV gives them (an expert without rows, one row, two passes of 8 rows, f32 and bf16);
// experts of mixed formats take linear per expert (their offsets read to the host once).
TEST(GgufLinear, GroupedExpertsReadTheOffsetsOnTheDevice) {
  const int64_t n = 40, k = 512;
  const std::vector<int32_t> offsets = {0, 3, 3, 4, 13, 18};  // at most 4 rows per expert on average
  const int64_t t = offsets.back(), e = static_cast<int64_t>(offsets.size()) - 1;
  for (weights::FileDType type : {weights::FileDType::q4_k, weights::FileDType::q5_k, weights::FileDType::q6_k,
                                  weights::FileDType::q5_1, weights::FileDType::q8_0, weights::FileDType::q2_k,
                                  weights::FileDType::q3_k}) {
    SCOPED_TRACE(weights::file_dtype_name(type));
    std::vector<ops::Weight> each;
    for (int64_t i = 0; i < e; ++i) each.push_back(random_gguf_weight(type, n, k, 100 + static_cast<uint64_t>(i)));
    const ops::ExpertWeights experts(ctx(), each);
    ASSERT_TRUE(experts.block_table().defined());
    Tensor off_h = Tensor::empty_host({e + 1}, DType::i32);
    std::memcpy(off_h.data_ptr(), offsets.data(), offsets.size() * sizeof(int32_t));
    const Tensor off = ctx().to_device(off_h);
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(dtype_name(dt));
      const Tensor x = ctx().to_device(random_host({t, k}, dt));
      Tensor out = ctx().empty({t, n}, dt), want = ctx().empty({t, n}, dt);
      poison(out);
      ops::ExpertRows rows(off);
      const uint64_t copies = ctx().host_transfers();
      ops::grouped_linear(ctx(), x, experts, rows, out, ops::GemmPath::gemv);
      EXPECT_EQ(ctx().host_transfers(), copies) << "the offsets were read to the host";
      for (int64_t i = 0; i < e; ++i)
        if (offsets[i] < offsets[i + 1])
          ops::linear(ctx(), x.slice(0, offsets[i], offsets[i + 1]), each[static_cast<size_t>(i)], Tensor(),
                      want.slice(0, offsets[i], offsets[i + 1]), ops::GemmPath::gemv);
      EXPECT_TRUE(bitwise_equal(ctx().to_host(out), ctx().to_host(want)));
    }
  }
  // Mixed formats: no table; the per-expert path gives the same rows.
  std::vector<ops::Weight> mixed;
  for (weights::FileDType type : {weights::FileDType::q4_k, weights::FileDType::q8_0}) {
    mixed.push_back(random_gguf_weight(type, n, k, 7));
  }
  EXPECT_FALSE(ops::ExpertWeights(ctx(), mixed).block_table().defined());
}

// ops::linear on the GEMV path over x and over `shifted`, its copy off the vector boundary: bit
// for bit the same at one row and at 9 (two passes).
void expect_linear_ignores_x_offset(const ops::Weight& w, const Tensor& x, const Tensor& shifted) {
  const int64_t n = w.out_features();
  for (int64_t m : {int64_t{1}, int64_t{9}}) {
    SCOPED_TRACE(::testing::Message() << "M=" << m);
    Tensor want = ctx().empty({m, n}, x.dtype()), got = ctx().empty({m, n}, x.dtype());
    poison(got);
    ops::linear(ctx(), x.slice(0, 0, m), w, Tensor(), want, ops::GemmPath::gemv);
    ops::linear(ctx(), shifted.slice(0, 0, m), w, Tensor(), got, ops::GemmPath::gemv);
    EXPECT_TRUE(bitwise_equal(ctx().to_host(got), ctx().to_host(want)));
  }
}

// x that starts off a vector boundary (a view at an odd element offset): the GEMVs (SIMT for f32,
// the fragment GEMV for f16 and bf16) read x in whole vectors, so linear and grouped_linear copy
// such an x, and give what an aligned copy of it gives, bit for bit (so does a stack of mixed
// formats); the kernels themselves refuse it with a message.
TEST(GgufLinear, XOffTheVectorBoundaryGivesWhatAnAlignedXGives) {
  const int64_t n = 40, k = 512;
  const std::vector<int32_t> offsets = {0, 1, 4, 13};
  const int64_t t = offsets.back(), e = static_cast<int64_t>(offsets.size()) - 1;
  Tensor off_h = Tensor::empty_host({e + 1}, DType::i32);
  std::memcpy(off_h.data_ptr(), offsets.data(), offsets.size() * sizeof(int32_t));
  const Tensor off = ctx().to_device(off_h);
  for (weights::FileDType type : {weights::FileDType::q4_k, weights::FileDType::q6_k, weights::FileDType::q8_0,
                                  weights::FileDType::q4_0}) {
    SCOPED_TRACE(weights::file_dtype_name(type));
    const kernels::BlockFormat block = *weights::block_format(type);
    std::vector<ops::Weight> each;
    for (int64_t i = 0; i < e; ++i) each.push_back(random_gguf_weight(type, n, k, 300 + static_cast<uint64_t>(i)));
    const ops::ExpertWeights experts(ctx(), each);
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      SCOPED_TRACE(dtype_name(dt));
      const Tensor x = ctx().to_device(random_host({t, k}, dt)), shifted = offset_copy(x);
      ASSERT_FALSE(gpu::aligned_to(gpu::kVectorBytes, shifted.data_ptr()));
      expect_linear_ignores_x_offset(each[0], x, shifted);
      Tensor want = ctx().empty({t, n}, dt), got = ctx().empty({t, n}, dt);
      poison(got);
      ops::ExpertRows rows(off), rows_shifted(off);
      ops::grouped_linear(ctx(), x, experts, rows, want, ops::GemmPath::gemv);
      ops::grouped_linear(ctx(), shifted, experts, rows_shifted, got, ops::GemmPath::gemv);
      EXPECT_TRUE(bitwise_equal(ctx().to_host(got), ctx().to_host(want)));
    }
    if (kernels::gguf_mma_gemv_serves(block)) {
      const Tensor x = ctx().to_device(random_host({2 * k + 1}, DType::bf16));
      Tensor out = ctx().empty({2, n}, DType::bf16);
      const auto* xp = x.data<bfloat16>();
      const void* wp = each[0].data().data_ptr();
      auto run = [&](const bfloat16* xs, int64_t ldx) {
        kernels::gguf_mma_gemv<bfloat16>(out.data<bfloat16>(), xs, wp, block, nullptr, 2, n, k, ldx, n,
                                         ctx().caps().multiprocessors, ctx().stream().get());
      };
      expect_error([&] { run(xp + 1, k); },
                   "x must start 16-byte aligned with its rows a multiple of 8 elements apart");
      expect_error([&] { run(xp, k + 1); }, "rows 513 apart");
    }
    const Tensor xf = ctx().to_device(random_host({2 * k + 1}, DType::f32));
    Tensor outf = ctx().empty({2, n}, DType::f32);
    expect_error(
        [&] {
          kernels::gguf_gemv<float>(outf.data<float>(), xf.data<float>() + 1, each[0].data().data_ptr(), block, nullptr,
                                    2, n, k, k, n, ctx().warp_size(), ctx().stream().get());
        },
        ": x must start 16-byte aligned with its rows a multiple of 4 elements apart");
  }
  const ops::Weight mixed = ops::Weight::gguf_mixed({random_gguf_weight(weights::FileDType::q4_k, 32, k, 310),
                                                     random_gguf_weight(weights::FileDType::q6_k, 16, k, 311)});
  SCOPED_TRACE(mixed.describe());
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = ctx().to_device(random_host({t, k}, dt));
    expect_linear_ignores_x_offset(mixed, x, offset_copy(x));
  }
}

// GGUF matrices of different formats stacked by rows (llama.cpp's Q4_K_M fused QKV: Q4_K q and
// k, Q6_K v) stay in their blocks: up to the fewest rows any part's GEMV takes, each part's
// columns bit for bit what the part alone gives; above, the expansion of the whole (each part's
// expansion in its rows) through the dense linear; and on the forced GEMV path, the parts' GEMVs.
TEST(GgufLinear, MixedFormatsStackedByRowsKeepTheirBlocks) {
  const int64_t k = 512;
  const std::vector<std::vector<std::pair<weights::FileDType, int64_t>>> stacks = {
      {{weights::FileDType::q4_k, 32}, {weights::FileDType::q4_k, 16}, {weights::FileDType::q6_k, 16}},
      {{weights::FileDType::q6_k, 13}, {weights::FileDType::q8_0, 8}},
      {{weights::FileDType::q3_k, 16}, {weights::FileDType::q2_k, 9}, {weights::FileDType::q3_k, 5}}};
  for (const auto& stack : stacks) {
    std::vector<ops::Weight> parts;
    size_t bytes = 0;
    for (const auto& [type, n] : stack) {
      parts.push_back(random_gguf_weight(type, n, k, 40 + parts.size()));
      bytes += parts.back().device_bytes();
    }
    const ops::Weight w = ops::Weight::gguf_mixed(parts);
    SCOPED_TRACE(w.describe());
    const int64_t n = w.out_features();
    EXPECT_EQ(w.device_bytes(), bytes);
    EXPECT_EQ(w.parts().size(), stack.size());
    // The expansion: each part's in its rows.
    const Tensor dense = ctx().to_host(ops::expand(ctx(), w, DType::f32));
    int64_t row = 0;
    for (const ops::Weight& p : parts) {
      const Tensor part = ctx().to_host(ops::expand(ctx(), p, DType::f32));
      EXPECT_EQ(std::memcmp(part.data_ptr(), dense.data<float>() + row * k, part.nbytes()), 0) << p.describe();
      row += p.out_features();
    }
    for (DType dt : {DType::f32, DType::bf16}) {
      int64_t most_rows = ops::kGgufMmaGemvMaxRows;
      for (const auto& [type, rows] : stack)
        most_rows = std::min(most_rows, dt == DType::f32                   ? ops::kGgufGemvMaxRows
                                        : type == weights::FileDType::q8_0 ? ops::kGgufMmaGemvMaxRowsNarrowLoads
                                                                           : ops::kGgufMmaGemvMaxRows);
      for (const auto& [m, path] : {std::pair{int64_t{1}, ops::GemmPath::automatic},
                                    {int64_t{5}, ops::GemmPath::automatic},
                                    {int64_t{20}, ops::GemmPath::automatic},
                                    {int64_t{9}, ops::GemmPath::gemv}}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " M=" << m << " " << ops::gemm_path_name(path));
        const Tensor x = ctx().to_device(random_host({m, k}, dt)), bias = ctx().to_device(random_host({n}, dt));
        Tensor got = ctx().empty({m, n}, dt), want = ctx().empty({m, n}, dt);
        poison(got);
        ops::linear(ctx(), x, w, bias, got, path);
        if (path == ops::GemmPath::gemv || m <= most_rows) {
          int64_t col = 0;
          for (const ops::Weight& p : parts) {
            Tensor part = ctx().empty({m, p.out_features()}, dt);
            ops::linear(ctx(), x, p, bias.slice(0, col, col + p.out_features()), part, path);
            const Tensor ph = ctx().to_host(part), gh = ctx().to_host(got);
            for (int64_t i = 0; i < m; ++i)
              ASSERT_EQ(std::memcmp(static_cast<const char*>(ph.data_ptr()) + i * ph.stride(0) * dtype_size(dt),
                                    static_cast<const char*>(gh.data_ptr()) + (i * n + col) * dtype_size(dt),
                                    static_cast<size_t>(p.out_features()) * dtype_size(dt)),
                        0)
                  << p.describe() << " row " << i;
            col += p.out_features();
          }
        } else {
          ops::linear(ctx(), x, ops::expand(ctx(), w, dt), bias, want);
          EXPECT_TRUE(bitwise_equal(ctx().to_host(got), ctx().to_host(want)));
        }
      }
    }
  }
  const std::vector<std::byte> raw = weights::random_blocks(weights::FileDType::q4_k, 4, 256, 1);
  Tensor h = Tensor::empty_host({static_cast<int64_t>(raw.size())}, DType::i8);
  std::memcpy(h.data_ptr(), raw.data(), raw.size());
  const ops::Weight q4k = ops::Weight::gguf(ops::WeightFormat::gguf_q4_k, 4, 256, ctx().to_device(h));
  const ops::Weight q4k_wide = ops::Weight::gguf(ops::WeightFormat::gguf_q4_k, 2, 512, ctx().to_device(h));
  expect_error([&] { ops::Weight::gguf_mixed({q4k}); }, "1 parts (at least two)");
  expect_error(
      [&] {
        ops::Weight::gguf_mixed({q4k, ops::Weight::dense(ctx().empty({4, 256}, DType::f32))});
      },
      "part 1 dense [4, 256] f32 is not GGUF blocks");
  expect_error([&] { ops::Weight::gguf_mixed({q4k, q4k_wide}); }, "has another K than part 0");
}

TEST(GgufLinear, RefusesMisuse) {
  const std::unique_ptr<weights::Checkpoint> ckpt = weights::open_checkpoint(kDir + "/linear.gguf");
  const ops::Weight w = gguf_weight(ckpt->get("w.q4_0"));
  const int64_t n = w.out_features(), k = w.in_features();
  Tensor out = ctx().empty({2, n}, DType::f16);
  expect_error([&] { ops::linear(ctx(), ctx().empty({2, k + 32}, DType::f16), w, Tensor(), out); },
               "must end in in_features 1280 of the weight gguf_q4_0 [13, 1280]");
  expect_error([&] { ops::linear(ctx(), ctx().empty({2, k}, DType::bf16), w, Tensor(), out); }, "dtypes differ");
  expect_error([&] { ops::linear(ctx(), ctx().empty({2, k}, DType::f16), w, ctx().empty({n + 1}, DType::f16), out); },
               "bias");
  expect_error([&] { weights::load_raw(ctx(), ckpt->get("w.q4_0"), 0, 14, 0, 10); }, "rows [0, 14)");
}

}  // namespace
}  // namespace lw::test
