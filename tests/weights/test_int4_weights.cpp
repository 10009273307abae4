// 4-bit weights (ops::Weight::int4) from make_fixtures.py's st_int4 checkpoint: GPTQ (v1 and v2
// zero points, symmetric, act-order, one group per row), AWQ and compressed-tensors
// pack-quantized (symmetric, and with zero points packed along N), quantised and packed in Python by the formats' published rules. Each loads to
// exactly the reference values; linear on the fused matrix-fragment kernel and on the expansion
// matches a float64 reference; shards and stacked parts keep (or expand) what they should; and
// broken tensors are refused by name.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "kernels/quant/int4.h"
#include "kernels/quant/int4_hopper.h"
#include "model/weight_loader.h"
#include "ops/check.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/int4_weight.h"
#include "ops/weight.h"
#include "test_util.h"
#include "weights/checkpoint.h"
#include "weights/fixture_values.h"
#include "weights/weight_values.h"

namespace lw::test {
namespace {

const std::string kDir = LW_WEIGHTS_FIXTURES;

struct Fixture : FixtureCheckpoint {
  Fixture() : FixtureCheckpoint(kDir, "st_int4") {}
  // A loader set up as the case's config.json would set it.
  std::unique_ptr<model::WeightLoader> loader(const std::string& name, const char* storage = "quantized") const {
    const auto& info = manifest[name];
    ScopedEnv env("LW_WEIGHT_STORAGE", storage);
    auto ld = std::make_unique<model::WeightLoader>(ctx(), ckpt.get(), DType::f32, false);
    model::WeightQuantization q;
    q.method = info["method"].get<std::string>();
    q.group_size = info["group_size"].get<int64_t>();
    q.gptq_v2 = info["checkpoint_format"].get<std::string>() == "gptq_v2";
    q.int4_asymmetric = q.method == "compressed-tensors" && !info["sym"].get<bool>();
    ld->set_quantization(q);
    return ld;
  }
};

// GPTQ tensors of random words, zero points and scales of [n, k] in groups of `group` columns.
ops::Int4Tensors random_gptq(int64_t n, int64_t k, int64_t group) {
  std::mt19937_64& gen = rng();
  auto words = [&](int64_t rows, int64_t cols) {
    Tensor h = Tensor::empty_host({rows, cols}, DType::i32);
    for (int64_t i = 0; i < h.numel(); ++i) h.data<int32_t>()[i] = static_cast<int32_t>(gen());
    return ctx().to_device(h);
  };
  const int64_t groups = (k + group - 1) / group;
  ops::Int4Tensors t;
  t.n = n, t.k = k, t.group = group;
  t.qweight = words(k / 8, n);
  t.qzeros = words(groups, n / 8);
  t.scales = ctx().to_device(random_host({groups, n}, DType::f16, 0.01, 0.1));
  return t;
}

// 0..k-1 shuffled, and as an i32 tensor on the device.
std::vector<int32_t> random_permutation(int64_t k) {
  std::vector<int32_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng());
  return perm;
}
Tensor permutation_on_device(const std::vector<int32_t>& perm) {
  Tensor h = Tensor::empty_host({static_cast<int64_t>(perm.size())}, DType::i32);
  std::copy(perm.begin(), perm.end(), h.data<int32_t>());
  return ctx().to_device(h);
}

kernels::Int4Matrix int4_matrix_of(const ops::Weight& w, int64_t group) {
  return {w.data().data_ptr(), w.scales().data<float>(), static_cast<const uint8_t*>(w.zeros().data_ptr()), w.out_features(),
          w.in_features(), group};
}

TEST(Int4Weights, EveryLayoutLoadsToTheReferenceValues) {
  Fixture fx;
  ASSERT_EQ(fx.cases().size(), 11u);
  for (const std::string& name : fx.cases()) {
    SCOPED_TRACE(name);
    const std::vector<int64_t> shape = fx.shape(name);
    const int64_t n = shape[0], k = shape[1];
    const ops::Weight w = fx.loader(name)->get_weight(name, shape);
    ASSERT_EQ(w.format(), ops::WeightFormat::int4);
    EXPECT_EQ(w.data().nbytes(), static_cast<size_t>(kernels::int4_tile_count(n, k) * kernels::kInt4TileBytes));
    EXPECT_EQ(w.perm().defined(), fx.manifest[name]["desc_act"].get<bool>());
    expect_kept_and_dense(w, fx.loader(name, "dense")->get_weight(name, shape), fx.values(name));
  }
}

// y = x W^T + b against float64 over the reference values: the fused kernel (one, two and four
// 16-row tiles of x, partial tiles; several passes on the forced path) and the expansion (more
// rows, f32, the tiled GEMM). The fused kernel multiplies exact weights (zero points subtracted
// in integers, scales in fp32); the expansion rounds each weight to x's dtype once.
TEST(Int4Weights, LinearMatchesTheFloat64Reference) {
  Fixture fx;
  struct Case {
    int64_t m;
    ops::GemmPath path;
  };
  const Case cases[] = {{1, ops::GemmPath::automatic},  {5, ops::GemmPath::automatic}, {17, ops::GemmPath::automatic},
                        {40, ops::GemmPath::gemv},      {70, ops::GemmPath::automatic}, {70, ops::GemmPath::gemv},
                        {3, ops::GemmPath::tiled}};
  for (const std::string& name : fx.cases()) {
    const std::vector<int64_t> shape = fx.shape(name);
    const int64_t n = shape[0], k = shape[1];
    const ops::Weight w = fx.loader(name)->get_weight(name, shape);
    const std::vector<float> wref = fx.values(name);
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (const Case& c : cases) {
        const bool with_bias = c.m % 2 == 1;
        SCOPED_TRACE(::testing::Message() << name << " " << dtype_name(dt) << " M=" << c.m << " "
                                          << ops::gemm_path_name(c.path) << (with_bias ? " bias" : ""));
        const Tensor xh = random_host({c.m, k}, dt);
        const Tensor bh = random_host({n}, dt);
        Tensor out = ctx().empty({c.m, n}, dt);
        poison(out);
        if (dt == DType::f32 && c.path == ops::GemmPath::gemv && c.m > 16) {
          // f32 rows take the expansion, whose dense GEMV serves 16 rows.
          expect_error([&] { ops::linear(ctx(), ctx().to_device(xh), w, Tensor(), out, c.path); },
                       "the gemv path takes at most 16 rows");
          continue;
        }
        ops::linear(ctx(), ctx().to_device(xh), w, with_bias ? ctx().to_device(bh) : Tensor(), out, c.path);
        expect_linear_near_reference(ctx().to_host(out), xh, with_bias ? bh : Tensor(), wref, n, k);
      }
  }
}

// A row's result does not depend on the other rows of the call: within the fused kernel's rows
// (its k splits depend on the weight only; 12 rows against 1) and in deterministic mode (the
// expansion at every M; 24 rows against 1).
TEST(Int4Weights, RowsDoNotDependOnTheBatch) {
  Fixture fx;
  const std::string name = "gptq_act_g64.weight";
  const ops::Weight w = fx.loader(name)->get_weight(name, fx.shape(name));
  const int64_t n = w.out_features(), k = w.in_features();
  const Tensor x = ctx().to_device(random_host({24, k}, DType::bf16));
  for (bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "automatic");
    std::optional<DeterministicScope> det;
    if (deterministic) det.emplace(ctx());
    const int64_t rows = deterministic ? 24 : 12;
    Tensor all = ctx().empty({rows, n}, DType::bf16), one = ctx().empty({1, n}, DType::bf16);
    ops::linear(ctx(), x.slice(0, 0, rows), w, Tensor(), all);
    ops::linear(ctx(), x.slice(0, 5, 6), w, Tensor(), one);
    EXPECT_TRUE(bitwise_equal(ctx().to_host(one), ctx().to_host(all.slice(0, 5, 6))));
  }
}

// MoE experts kept 4-bit: grouped_linear runs each group's rows through its own weight (the
// fused kernel at 3 and 17 rows, the expansion at 70, nothing for an empty group; a dense
// group beside them), each against the float64 reference of its weight; bad offsets and
// weights of another shape are refused.
TEST(Int4Weights, GroupedLinearRunsEachGroupThroughItsWeight) {
  const int64_t n = 48, k = 256;
  std::vector<ops::Weight> weights;
  for (int i = 0; i < 4; ++i) weights.push_back(ops::int4_weight(ctx(), random_gptq(n, k, i == 2 ? 64 : 128)));
  weights.push_back(ops::Weight::dense(ctx().to_device(random_host({n, k}, DType::bf16))));
  const std::vector<int32_t> offsets = {0, 3, 3, 20, 90, 95};
  const int64_t t = offsets.back();
  const Tensor xh = random_host({t, k}, DType::bf16);
  Tensor out = ctx().empty({t, n}, DType::bf16);
  poison(out);
  ops::grouped_linear(ctx(), ctx().to_device(xh), weights, offsets, out);
  const Tensor got = ctx().to_host(out);
  for (size_t g = 0; g < weights.size(); ++g) {
    SCOPED_TRACE(::testing::Message() << "group " << g);
    const int64_t begin = offsets[g], end = offsets[g + 1];
    if (begin == end) continue;
    const Tensor wh = ctx().to_host(ops::expand(ctx(), weights[g], DType::f32));
    const std::vector<float> wref(wh.data<float>(), wh.data<float>() + n * k);
    expect_linear_near_reference(got.slice(0, begin, end), xh.slice(0, begin, end), Tensor(), wref, n, k);
  }
  const Tensor x = ctx().to_device(xh);
  expect_error([&] { ops::grouped_linear(ctx(), x, weights, std::vector<int32_t>{0, 3, 3, 20, 95}, out); },
               "5 offsets for 5 groups; expected 6");
  expect_error([&] { ops::grouped_linear(ctx(), x, weights, std::vector<int32_t>{0, 3, 2, 20, 90, 95}, out); },
               "offsets decrease at group 1 (3 > 2)");
  expect_error([&] { ops::grouped_linear(ctx(), x, weights, std::vector<int32_t>{0, 3, 3, 20, 90, 94}, out); },
               "offsets must run from 0 to T = 95; got 0 .. 94");
  weights.push_back(ops::int4_weight(ctx(), random_gptq(n + 16, k, 128)));
  expect_error([&] { ops::grouped_linear(ctx(), x, weights, std::vector<int32_t>{0, 3, 3, 20, 90, 95, 95}, out); },
               "the groups' weights differ in shape");
}

// The grouped kernel (one launch; offsets read on the device) over 4-bit experts: empty experts,
// one row, exactly one pass of 8, several passes (9 and 19 rows), in one and three k splits; each
// expert's rows against the float64 reference of its weight and bit for bit against the streamed
// kernel over the same expert, rows and splits. grouped_linear takes it on the automatic and
// gemv paths; experts without a table (a dense one, an act-order one) run each expert's rows
// through linear, with the offsets read to the host.
// kernels::int4_grouped_gemv over experts with `counts` rows each, in one and three k splits:
// each expert's rows bit for bit against the streamed kernel over the same expert, rows and
// splits, and against the float64 reference of its weight.
struct GroupedCase {
  int64_t n, k, e, t;
  std::vector<int32_t> offsets;
  std::vector<ops::Weight> weights;
  Tensor xh, x, off;
  GroupedCase(int64_t n_, int64_t k_, const std::vector<int32_t>& counts) : n(n_), k(k_), offsets{0} {
    for (int32_t c : counts) offsets.push_back(offsets.back() + c);
    e = static_cast<int64_t>(counts.size());
    t = offsets.back();
    for (int64_t i = 0; i < e; ++i) weights.push_back(ops::int4_weight(ctx(), random_gptq(n, k, 128)));
    Tensor off_host = Tensor::empty_host({e + 1}, DType::i32);
    std::copy(offsets.begin(), offsets.end(), off_host.data<int32_t>());
    off = ctx().to_device(off_host);
    xh = random_host({t, k}, DType::bf16);
    x = ctx().to_device(xh);
  }
  void expect_reference(const Tensor& got, const std::vector<ops::Weight>& ws) const {
    for (int64_t g = 0; g < e; ++g) {
      SCOPED_TRACE(::testing::Message() << "expert " << g);
      const int64_t begin = offsets[static_cast<size_t>(g)], end = offsets[static_cast<size_t>(g) + 1];
      if (begin == end) continue;
      const Tensor wh = ctx().to_host(ops::expand(ctx(), ws[static_cast<size_t>(g)], DType::f32));
      const std::vector<float> wref(wh.data<float>(), wh.data<float>() + n * k);
      expect_linear_near_reference(got.slice(0, begin, end), xh.slice(0, begin, end), Tensor(), wref, n, k);
    }
  }
  void expect_kernel_gives_streamed(const ops::ExpertWeights& experts) const {
    const kernels::Int4Matrix shape = int4_matrix_of(weights[0], 128);
    const auto* table = static_cast<const kernels::Int4Matrix*>(experts.int4_table().data_ptr());
    for (int splits : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << splits << " splits");
      Tensor out = ctx().empty({t, n}, DType::bf16), want = ctx().empty({t, n}, DType::bf16);
      poison(out);
      poison(want);
      Tensor workspace = ctx().empty({splits * t * n}, DType::f32);
      kernels::int4_grouped_gemv<bfloat16>(out.data<bfloat16>(), x.data<bfloat16>(), shape, table, e, off.data<int32_t>(), t,
                                           splits, workspace.data<float>(), ctx().warp_size(), ctx().stream().get());
      for (int64_t g = 0; g < e; ++g)
        for (int64_t r0 = offsets[static_cast<size_t>(g)]; r0 < offsets[static_cast<size_t>(g) + 1]; r0 += 8) {
          const int64_t rows = std::min<int64_t>(8, offsets[static_cast<size_t>(g) + 1] - r0);
          kernels::int4_gemm<bfloat16>(want.data<bfloat16>() + r0 * n, x.data<bfloat16>() + r0 * k,
                                       int4_matrix_of(weights[static_cast<size_t>(g)], 128), nullptr, rows, k, n, splits,
                                       workspace.data<float>(), nullptr, ctx().warp_size(), ctx().stream().get(),
                                       kernels::Int4GemmKernel::streamed);
        }
      const Tensor got = ctx().to_host(out);
      EXPECT_TRUE(bitwise_equal(got, ctx().to_host(want)));
      expect_reference(got, weights);
    }
  }
};

// The grouped int4 kernel reads the offsets on the device: experts without rows, one row,
// exactly one pass of 8, several passes (9 and 19 rows), by expert and by row (at most a row per
// four experts: a block per pass that exists, a decode step of few tokens among many experts);
// grouped_linear takes it on the automatic and gemv paths; experts without a table (a dense
// one, an act-order one) run each expert's rows through linear, with the offsets read to the host.
TEST(Int4Weights, GroupedKernelReadsTheOffsetsOnTheDevice) {
  // five row tiles (a partial block of them), 16 column tiles, groups of 128
  std::vector<int32_t> few(64, 0);  // 13 rows among 64 experts: by row
  few[1] = 2, few[4] = 1, few[6] = 9, few[63] = 1;
  const GroupedCase by_row(80, 1024, few);
  ASSERT_LE(4 * by_row.t, by_row.e);
  by_row.expect_kernel_gives_streamed(ops::ExpertWeights(ctx(), by_row.weights));
  const GroupedCase many(80, 1024, {3, 0, 19, 1, 8, 9});
  const ops::ExpertWeights experts(ctx(), many.weights);
  ASSERT_TRUE(experts.int4_table().defined());
  many.expect_kernel_gives_streamed(experts);
  const int64_t n = many.n, k = many.k, e = many.e, t = many.t;
  const std::vector<ops::Weight>& weights = many.weights;
  const Tensor& x = many.x;
  const Tensor& off = many.off;
  auto expect_reference = [&](const Tensor& got, const std::vector<ops::Weight>& ws) { many.expect_reference(got, ws); };
  for (ops::GemmPath path : {ops::GemmPath::automatic, ops::GemmPath::gemv}) {
    SCOPED_TRACE(ops::gemm_path_name(path));
    Tensor out = ctx().empty({t, n}, DType::bf16);
    poison(out);
    ops::ExpertRows rows(off);
    ops::grouped_linear(ctx(), x, experts, rows, out, path);
    expect_reference(ctx().to_host(out), weights);
  }
  // No table: a dense expert among them, or an act-order one (its columns permuted).
  std::vector<ops::Weight> mixed = weights;
  mixed[3] = ops::Weight::dense(ops::expand(ctx(), weights[3], DType::bf16));
  ops::Int4Tensors act = random_gptq(n, k, 128);
  std::vector<int32_t> g_idx(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c) g_idx[static_cast<size_t>(c)] = static_cast<int32_t>((c * 5 % k) / 128);
  Tensor g_host = Tensor::empty_host({k}, DType::i32);
  std::copy(g_idx.begin(), g_idx.end(), g_host.data<int32_t>());
  act.g_idx = ctx().to_device(g_host);
  std::vector<ops::Weight> with_act = weights;
  with_act[2] = ops::int4_weight(ctx(), act);
  ASSERT_TRUE(with_act[2].perm().defined());
  for (const auto* ws : {&mixed, &with_act}) {
    const ops::ExpertWeights each(ctx(), *ws);
    EXPECT_FALSE(each.int4_table().defined());
    Tensor out = ctx().empty({t, n}, DType::bf16);
    poison(out);
    ops::ExpertRows rows(off);
    ops::grouped_linear(ctx(), x, each, rows, out);
    expect_reference(ctx().to_host(out), *ws);
  }
  ops::ExpertRows short_rows(off.slice(0, 0, e));
  expect_error([&] { ops::grouped_linear(ctx(), x, experts, short_rows, ctx().empty({t, n}, DType::bf16)); },
               "must be contiguous i32 [7]");
}

// A rank's rows stay 4-bit; columns stay 4-bit on group edges and are expanded where they cut a
// group or the weight is act-order; parts stack by rows where whole tiles allow.
TEST(Int4Weights, ShardsAndStackedParts) {
  Fixture fx;
  const std::string name = "gptq_asym_g128.weight";  // [48, 256], groups of 128
  const std::vector<float> ref = fx.values(name);
  auto part = [&](const std::string& which, model::WeightLoader::Part p) {
    return fx.loader(which)->get_weight(which, fx.shape(which), p);
  };
  ops::Weight rows = part(name, {0, 16, 48});
  EXPECT_EQ(rows.format(), ops::WeightFormat::int4);
  expect_values(rows, ref, 256, 16, 48, 0, 256);
  ops::Weight cols = part(name, {1, 128, 256});
  EXPECT_EQ(cols.format(), ops::WeightFormat::int4);
  expect_values(cols, ref, 256, 0, 48, 128, 256);
  ops::Weight cut = part(name, {1, 64, 192});
  EXPECT_EQ(cut.format(), ops::WeightFormat::dense);
  expect_values(cut, ref, 256, 0, 48, 64, 192);
  const std::string act = "gptq_act_g64.weight";  // [64, 320], act-order
  ops::Weight act_cols = part(act, {1, 64, 128});
  EXPECT_EQ(act_cols.format(), ops::WeightFormat::dense);
  expect_values(act_cols, fx.values(act), 320, 0, 64, 64, 128);
  ops::Weight act_rows = part(act, {0, 16, 40});
  EXPECT_EQ(act_rows.format(), ops::WeightFormat::int4);
  expect_values(act_rows, fx.values(act), 320, 16, 40, 0, 320);

  // Zero points stored packed along N (asymmetric pack-quantized): a rank's rows starting inside
  // a word of eight, and a rank's whole groups of columns.
  const std::string ct = "ct_asym_g64.weight";  // [40, 192], groups of 64
  for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{5, 29}, {16, 40}}) {
    ops::Weight ct_rows = part(ct, {0, r0, r1});
    EXPECT_EQ(ct_rows.format(), ops::WeightFormat::int4);
    expect_values(ct_rows, fx.values(ct), 192, r0, r1, 0, 192);
  }
  ops::Weight ct_cols = part(ct, {1, 64, 192});
  EXPECT_EQ(ct_cols.format(), ops::WeightFormat::int4);
  expect_values(ct_cols, fx.values(ct), 192, 0, 40, 64, 192);

  // Stacked: whole tiles of rows stay one int4 weight; a first part of 40 rows does not.
  auto ld = fx.loader(name);
  const ops::Weight stacked = ld->fuse_weights({part(name, {0, 0, 16}), part(name, {0, 16, 48})});
  EXPECT_EQ(stacked.format(), ops::WeightFormat::int4);
  expect_values(stacked, ref, 256, 0, 48, 0, 256);
  const ops::Weight uneven = ld->fuse_weights({part(name, {0, 0, 40}), part(name, {0, 40, 48})});
  EXPECT_EQ(uneven.format(), ops::WeightFormat::dense);
  expect_values(uneven, ref, 256, 0, 48, 0, 256);
}

// Parts of several bands of row tiles (9 and 10 of them: the second part's tiles fall in the
// first's last band and beyond, its last row tile half outside): the stacked weight expands to
// the parts' expansions one after the other, and its fused product is the float64 product of
// that expansion at 1 and 3 rows of x (the streamed kernel, a band a block), 20 (the ring
// kernel, two bands a block) and 40 (the ring kernel, a band a block); a part that is not whole
// tiles is placed only at the matrix's end.
TEST(Int4Weights, StackedPartsAcrossBands) {
  const int64_t k = 384, group = 128, na = 144, nb = 152;
  const ops::Weight a = ops::int4_weight(ctx(), random_gptq(na, k, group));
  const ops::Weight b = ops::int4_weight(ctx(), random_gptq(nb, k, group));
  const ops::Weight stacked = ops::int4_stack_rows(ctx(), {a, b});
  ASSERT_EQ(stacked.format(), ops::WeightFormat::int4);
  ASSERT_EQ(stacked.out_features(), na + nb);
  const Tensor ea = ctx().to_host(ops::expand(ctx(), a, DType::f32)), eb = ctx().to_host(ops::expand(ctx(), b, DType::f32));
  const Tensor es = ctx().to_host(ops::expand(ctx(), stacked, DType::f32));
  ASSERT_EQ(std::memcmp(es.data_ptr(), ea.data_ptr(), ea.nbytes()), 0);
  ASSERT_EQ(std::memcmp(static_cast<const char*>(es.data_ptr()) + ea.nbytes(), eb.data_ptr(), eb.nbytes()), 0);
  for (int64_t m : {1, 3, 20, 40}) {
    const Tensor xh = random_host({m, k}, DType::bf16);
    Tensor out = ctx().empty({m, na + nb}, DType::bf16);
    ops::linear(ctx(), ctx().to_device(xh), stacked, Tensor(), out, ops::GemmPath::gemv);
    const Tensor got = ctx().to_host(out);
    const double acc_eps = static_cast<double>(k) * std::ldexp(1.0, -24);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < na + nb; ++j) {
        double ref = 0.0, mag = 0.0;
        for (int64_t l = 0; l < k; ++l) {
          const double p = element(xh, i * k + l) * static_cast<double>(es.data<float>()[j * k + l]);
          ref += p;
          mag += std::abs(p);
        }
        ASSERT_LE(std::abs(element(got, i * (na + nb) + j) - ref), epsilon(DType::bf16) * std::abs(ref) + acc_eps * mag + 1e-6)
            << m << " rows, element [" << i << ", " << j << "]";
      }
  }
  Tensor into = ctx().empty({kernels::int4_tile_count(na + nb + 16, k) * kernels::kInt4TileBytes}, DType::i8);
  expect_error(
      [&] {
        kernels::int4_place_tiles(into.data_ptr(), na + nb + 16, b.data().data_ptr(), nb, na / kernels::kInt4TileRows, k,
                                  ctx().stream().get());
      },
      "does not end the matrix");
}

// Random GPTQ tensors of a shape the fixtures do not reach: K split over several blocks (the
// fp32 workspace and its reduction), groups of 128 and of 64 (one tile) over several steps of a
// split (the next group's parameters loaded a tile ahead), a split longer than the kernel's ring
// (K = 576: nine steps, at most two splits, so entries are refilled), K below one tile and K not
// a multiple of 16 with groups of 16 and 32, act-order. The fused kernel against float64 over the
// expansion (exact against the Python references above), a row alone against the same row among
// 40 (another kernel variant), and x copied in 4-byte pieces (rows 4-byte but not 16-byte
// aligned) against the aligned call at 9, 20 and 40 rows (each tile count of x).
TEST(Int4Weights, FusedKernelOnLargerShapes) {
  std::mt19937_64& gen = rng();
  struct Shape {
    int64_t n, k, group;
    bool act_order;
  };
  for (const Shape& sh : {Shape{32, 2048, 128, false}, Shape{24, 104, 32, false}, Shape{48, 1024, 64, true},
                          Shape{32, 576, 64, false}, Shape{16, 48, 16, false}}) {
    SCOPED_TRACE(::testing::Message() << "[" << sh.n << ", " << sh.k << "] group " << sh.group
                                      << (sh.act_order ? " act-order" : ""));
    ops::Int4Tensors t = random_gptq(sh.n, sh.k, sh.group);
    if (sh.act_order) {
      std::vector<int32_t> perm(static_cast<size_t>(sh.k));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), gen);
      Tensor g = Tensor::empty_host({sh.k}, DType::i32);
      for (int64_t i = 0; i < sh.k; ++i) g.data<int32_t>()[perm[static_cast<size_t>(i)]] = static_cast<int32_t>(i / sh.group);
      t.g_idx = ctx().to_device(g);
    }
    const ops::Weight w = ops::int4_weight(ctx(), t);
    EXPECT_EQ(w.perm().defined(), sh.act_order);
    const Tensor wref = ctx().to_host(ops::expand(ctx(), w, DType::f32));
    if (sh.k == 2048)
      EXPECT_GT(kernels::int4_gemm_splits({w.data().data_ptr(), nullptr, nullptr, sh.n, sh.k, sh.group}, 2), 1);
    for (DType dt : {DType::f16, DType::bf16}) {
      const int64_t m = 40;
      const Tensor xh = random_host({m, sh.k}, dt);
      const Tensor x = ctx().to_device(xh);
      Tensor out = ctx().empty({m, sh.n}, dt), one = ctx().empty({1, sh.n}, dt);
      ops::linear(ctx(), x, w, Tensor(), out, ops::GemmPath::gemv);
      ops::linear(ctx(), x.slice(0, 5, 6), w, Tensor(), one, ops::GemmPath::gemv);
      EXPECT_TRUE(bitwise_equal(ctx().to_host(one), ctx().to_host(out.slice(0, 5, 6)))) << dtype_name(dt);
      for (int64_t rows : {9, 20, 40}) {
        // x 4-byte but not 16-byte aligned (copied in 4-byte pieces): the same sums.
        Tensor flat = Tensor::empty_host({rows * sh.k + 2}, dt);
        std::memcpy(static_cast<char*>(flat.data_ptr()) + 2 * dtype_size(dt), xh.data_ptr(),
                    static_cast<size_t>(rows * sh.k) * dtype_size(dt));
        std::memcpy(flat.data_ptr(), xh.data_ptr(), 2 * dtype_size(dt));
        const Tensor shifted = ctx().to_device(flat).slice(0, 2, rows * sh.k + 2).view({rows, sh.k});
        Tensor again = ctx().empty({rows, sh.n}, dt);
        ops::linear(ctx(), shifted, w, Tensor(), again, ops::GemmPath::gemv);
        EXPECT_TRUE(bitwise_equal(ctx().to_host(again), ctx().to_host(out.slice(0, 0, rows))))
            << dtype_name(dt) << " unaligned x, " << rows << " rows";
      }
      const Tensor got = ctx().to_host(out);
      const double eps = epsilon(dt), acc_eps = static_cast<double>(sh.k) * std::ldexp(1.0, -24);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < sh.n; ++j) {
          double ref = 0.0, mag = 0.0;
          for (int64_t l = 0; l < sh.k; ++l) {
            const double p = element(xh, i * sh.k + l) * static_cast<double>(wref.data<float>()[j * sh.k + l]);
            ref += p;
            mag += std::abs(p);
          }
          ASSERT_LE(std::abs(element(got, i * sh.n + j) - ref), eps * std::abs(ref) + acc_eps * mag + 1e-6)
              << dtype_name(dt) << " element [" << i << ", " << j << "]";
        }
    }
  }
}

// The fused kernel's k splits added by the last block of each row block (counters) and by a
// second launch: the same bits, with a bias, over several row blocks (the last one partial, its
// last row tile half outside N), at 1, 9 and 40 rows of x in the planned splits and at 1, 3 and
// 9 in 37 and 40 (a split a tile of 37: two chunks of the 16 the last block loads at once and
// part of a third; 3 of the 40 empty); the counters are zero after each launch, and a second
// call through the same counters gives the same result. (On compute capability 9.0+ the runs
// of 2-8 splits and up to 4 rows are added in a cluster of their blocks instead, the counters
// untouched.)
TEST(Int4Weights, SplitsAddedByTheirLastBlock) {
  const int64_t n = 296, k = 2368, group = 64;
  const ops::Weight w = ops::int4_weight(ctx(), random_gptq(n, k, group));
  const kernels::Int4Matrix km = int4_matrix_of(w, group);
  const int planned = kernels::int4_gemm_splits(km, 2);
  ASSERT_GT(planned, 1);
  const Tensor bias = ctx().to_device(random_host({n}, DType::bf16));
  // Also more splits than the last block loads at once (16), some of them empty.
  for (auto [m, splits] : {std::pair<int64_t, int>{1, planned}, {9, planned}, {40, planned}, {1, 37}, {3, 40}, {9, 37}}) {
    SCOPED_TRACE(::testing::Message() << m << " rows of x, " << splits << " splits");
    const int64_t blocks = kernels::int4_gemm_counters(km, m);
    ASSERT_GT(blocks, 1);
    const Tensor x = ctx().to_device(random_host({m, k}, DType::bf16));
    Tensor by_last = ctx().empty({m, n}, DType::bf16), again = ctx().empty({m, n}, DType::bf16),
           by_launch = ctx().empty({m, n}, DType::bf16);
    Tensor ws = ctx().empty({splits * m * n}, DType::f32);
    Tensor counters = ctx().to_device(Tensor::empty_host({blocks}, DType::i32));
    LW_CUDA_CHECK(cudaMemsetAsync(counters.data_ptr(), 0, counters.nbytes(), ctx().stream().get()));
    auto run = [&](Tensor& y, int32_t* c) {
      kernels::int4_gemm<bfloat16>(y.data<bfloat16>(), x.data<bfloat16>(), km, bias.data<bfloat16>(), m, k, n, splits,
                                   ws.data<float>(), c, ctx().warp_size(), ctx().stream().get());
    };
    run(by_last, counters.data<int32_t>());
    const Tensor left = ctx().to_host(counters);
    for (int64_t b = 0; b < blocks; ++b) EXPECT_EQ(left.data<int32_t>()[b], 0) << "counter " << b;
    run(again, counters.data<int32_t>());
    run(by_launch, nullptr);
    EXPECT_TRUE(bitwise_equal(ctx().to_host(by_last), ctx().to_host(by_launch)));
    EXPECT_TRUE(bitwise_equal(ctx().to_host(again), ctx().to_host(by_launch)));
  }
}

// The streamed kernel (weights into registers, up to 8 rows of x) against the ring kernel, bit
// for bit: 1 to 8 rows, f16 and bf16, one split, the device's splits, splits that cut groups and
// more splits than tiles (empty splits), with and without the last block's counters (counted
// runs of 2-8 splits are added in a cluster of their blocks on compute capability 9.0+), x rows 16-
// and only 4-byte aligned, several row blocks with a partial last row tile, groups of 64, 128 and
// 192 columns and one group per row with K not a multiple of the tile (its last step partial).
// Where it does not serve (9 rows, groups of 32), forcing it is refused.
TEST(Int4Weights, StreamedKernelGivesTheRingKernelsBits) {
  struct Shape {
    int64_t n, k, group;
  };
  for (const Shape& sh : {Shape{296, 1024, 128}, Shape{40, 576, 64}, Shape{24, 1152, 192}, Shape{48, 200, 200}}) {
    const ops::Weight w = ops::int4_weight(ctx(), random_gptq(sh.n, sh.k, sh.group));
    const kernels::Int4Matrix km = int4_matrix_of(w, sh.group);
    const int64_t tiles_k = (sh.k + kernels::kInt4TileCols - 1) / kernels::kInt4TileCols;
    for (int splits : {1, kernels::int4_gemm_splits(km, 2), 3, static_cast<int>(tiles_k) + 2}) {
      for (int64_t m = 1; m <= 8; ++m) {
        const DType dt = m % 2 == 0 ? DType::f16 : DType::bf16;
        const bool counted = m % 3 != 0, aligned = m != 5;
        SCOPED_TRACE(::testing::Message() << "[" << sh.n << ", " << sh.k << "] group " << sh.group << ", " << splits
                                          << " splits, " << m << " rows, " << dtype_name(dt) << (counted ? ", counters" : "")
                                          << (aligned ? "" : ", x 4-byte aligned"));
        if (!kernels::int4_gemv_serves(km, m, splits)) {
          // Only x's columns of a split too many for shared memory beside the kernel's ring.
          const int64_t per_split = (tiles_k + splits - 1) / splits;
          EXPECT_GT(m * per_split * kernels::kInt4TileCols * 2, 8 * 1024);
          continue;
        }
        const int64_t ldx = aligned ? sh.k : sh.k + 2;
        const Tensor x = ctx().to_device(random_host({m * ldx + 2}, dt)).slice(0, aligned ? 0 : 2, m * ldx + (aligned ? 0 : 2));
        const Tensor bias = ctx().to_device(random_host({sh.n}, dt));
        Tensor ws = ctx().empty({splits * m * sh.n}, DType::f32);
        const int64_t blocks = kernels::int4_gemm_counters(km, m);
        Tensor counters = ctx().to_device(Tensor::empty_host({blocks}, DType::i32));
        LW_CUDA_CHECK(cudaMemsetAsync(counters.data_ptr(), 0, counters.nbytes(), ctx().stream().get()));
        auto run = [&](kernels::Int4GemmKernel kernel) {
          Tensor y = ctx().empty({m, sh.n}, dt);
          poison(y);
          ops::dispatch_float(dt, "test", [&]<class T>() {
            if constexpr (!std::is_same_v<T, float>)
              kernels::int4_gemm<T>(y.data<T>(), x.data<T>(), km, bias.data<T>(), m, ldx, sh.n, splits,
                                    splits > 1 ? ws.data<float>() : nullptr, counted ? counters.data<int32_t>() : nullptr,
                                    ctx().warp_size(), ctx().stream().get(), kernel);
          });
          return ctx().to_host(y);
        };
        const Tensor ring = run(kernels::Int4GemmKernel::ring), streamed = run(kernels::Int4GemmKernel::streamed);
        EXPECT_TRUE(bitwise_equal(streamed, ring));
        for (double v : to_doubles(streamed)) ASSERT_TRUE(std::isfinite(v)) << "an unwritten or non-finite output";
      }
    }
  }
  const ops::Weight w = ops::int4_weight(ctx(), random_gptq(32, 256, 32));
  const kernels::Int4Matrix small_groups = int4_matrix_of(w, 32);
  EXPECT_FALSE(kernels::int4_gemv_serves(small_groups, 1, 1));
  const kernels::Int4Matrix whole{small_groups.tiles, small_groups.scales, small_groups.zeros, 32, 256, 256};
  EXPECT_TRUE(kernels::int4_gemv_serves(whole, 8, 1));
  EXPECT_FALSE(kernels::int4_gemv_serves(whole, 9, 1));
  Tensor x = ctx().to_device(random_host({1, 256}, DType::bf16)), y = ctx().empty({1, 32}, DType::bf16);
  expect_error(
      [&] {
        kernels::int4_gemm<bfloat16>(y.data<bfloat16>(), x.data<bfloat16>(), small_groups, nullptr, 1, 256, 32, 1, nullptr, nullptr,
                                     ctx().warp_size(), ctx().stream().get(), kernels::Int4GemmKernel::streamed);
      },
      "the streamed kernel does not serve 1 rows");
}

// The Hopper kernel (wgmma, sm_90) against the ring kernel (the matrix-fragment layer, its
// oracle) over the same splits: 1 to 130 rows of x (the ring kernel in 64-row chunks), partial
// row tiles and blocks, K past the last whole tile, groups of one and several tiles and one
// group a row, empty splits, f16 and bf16, x rows 4-byte aligned, bias, y's rows wider than n. Only where the kernel
// exists (a Hopper GPU and a build for 90); its refusals are checked everywhere below.
TEST(Int4Weights, HopperKernelMatchesTheRingKernel) {
  if (!kernels::kInt4HopperBuilt || !ctx().caps().matrix.wgmma)
    GTEST_SKIP() << "no Hopper int4 kernel here (an sm_90 device and a build for 90)";
  struct Shape {
    int64_t n, k, group;
  };
  for (const Shape& sh : {Shape{296, 1024, 128}, Shape{40, 576, 64}, Shape{24, 1152, 192}, Shape{48, 200, 200}}) {
    const ops::Weight w = ops::int4_weight(ctx(), random_gptq(sh.n, sh.k, sh.group));
    const kernels::Int4Matrix km = int4_matrix_of(w, sh.group);
    ASSERT_TRUE(kernels::int4_hopper_serves(km));
    const int64_t tiles_k = (sh.k + kernels::kInt4TileCols - 1) / kernels::kInt4TileCols;
    for (int splits : {1, kernels::int4_gemm_splits(km, 2), 3, static_cast<int>(tiles_k) + 2}) {
      for (int64_t m : {1, 3, 8, 9, 16, 17, 30, 33, 64, 70, 130}) {
        const DType dt = m % 2 == 0 ? DType::f16 : DType::bf16;
        const bool aligned = m % 3 != 0;
        SCOPED_TRACE(::testing::Message() << "[" << sh.n << ", " << sh.k << "] group " << sh.group << ", " << splits
                                          << " splits, " << m << " rows, " << dtype_name(dt)
                                          << (aligned ? "" : ", x 4-byte aligned"));
        const int64_t ldx = aligned ? sh.k : sh.k + 2;
        const Tensor x = ctx().to_device(random_host({m * ldx}, dt));
        const Tensor bias = ctx().to_device(random_host({sh.n}, dt));
        Tensor ws = ctx().empty({splits * m * sh.n}, DType::f32);
        // y's rows ldy apart: the columns past n keep their poison.
        auto run = [&](kernels::Int4GemmKernel kernel, int64_t chunk, int64_t ldy) {
          Tensor y = ctx().empty({m, ldy}, dt);
          poison(y);
          ops::dispatch_float(dt, "test", [&]<class T>() {
            if constexpr (!std::is_same_v<T, float>)
              for (int64_t r0 = 0; r0 < m; r0 += chunk)
                kernels::int4_gemm<T>(y.data<T>() + r0 * ldy, x.data<T>() + r0 * ldx, km, bias.data<T>(),
                                      std::min(chunk, m - r0), ldx, ldy, splits, splits > 1 ? ws.data<float>() : nullptr,
                                      nullptr, ctx().warp_size(), ctx().stream().get(), kernel);
          });
          return ctx().to_host(y);
        };
        const int64_t ldy = m % 2 == 1 ? sh.n + 8 : sh.n;
        const Tensor wide = run(kernels::Int4GemmKernel::hopper, m, ldy);
        const Tensor ring = run(kernels::Int4GemmKernel::ring, kernels::kInt4GemmMaxRows, sh.n);
        Tensor hopper = Tensor::empty_host({m, sh.n}, dt);
        const size_t row_bytes = static_cast<size_t>(sh.n) * dtype_size(dt);
        for (int64_t r = 0; r < m; ++r)
          std::memcpy(static_cast<char*>(hopper.data_ptr()) + static_cast<size_t>(r) * row_bytes,
                      static_cast<const char*>(wide.data_ptr()) + static_cast<size_t>(r * ldy) * dtype_size(dt), row_bytes);
        EXPECT_TRUE(bitwise_equal(hopper, ring));
        for (double v : to_doubles(hopper)) ASSERT_TRUE(std::isfinite(v)) << "an unwritten or non-finite output";
        if (ldy > sh.n) {
          const auto* bytes = static_cast<const unsigned char*>(wide.data_ptr());
          const auto es = static_cast<int64_t>(dtype_size(dt));
          for (int64_t r = 0; r < m; ++r)
            for (int64_t b = (r * ldy + sh.n) * es; b < (r + 1) * ldy * es; ++b)
              ASSERT_EQ(bytes[b], 0xffu) << "row " << r << ": a column past n written";
        }
      }
    }
  }
}

// The Hopper kernel refused where it cannot run: groups that are not whole tiles, a permutation
// or a gated x (the streamed kernel's), and anywhere in a build without it.
TEST(Int4Weights, HopperKernelRefusals) {
  const int64_t n = 32, k = 256;
  const ops::Weight w = ops::int4_weight(ctx(), random_gptq(n, k, 32));
  const kernels::Int4Matrix small_groups = int4_matrix_of(w, 32), whole{small_groups.tiles, small_groups.scales,
                                                                        small_groups.zeros, n, k, k};
  EXPECT_FALSE(kernels::int4_hopper_serves(small_groups));
  EXPECT_TRUE(kernels::int4_hopper_serves(whole));
  const Tensor x = ctx().to_device(random_host({2, 2 * k}, DType::bf16));
  Tensor y = ctx().empty({2, n}, DType::bf16);
  const Tensor perm = permutation_on_device(random_permutation(k));
  auto call = [&](const kernels::Int4Matrix& km, const int32_t* x_perm, kernels::Int4Gate gate) {
    kernels::int4_gemm<bfloat16>(y.data<bfloat16>(), x.data<bfloat16>(), km, nullptr, 2, 2 * k, n, 1, nullptr, nullptr,
                                 ctx().warp_size(), ctx().stream().get(), kernels::Int4GemmKernel::hopper, x_perm, gate);
  };
  expect_error([&] { call(whole, perm.data<int32_t>(), {}); }, "(the hopper kernel was asked for)");
  expect_error([&] { call(whole, nullptr, kernels::Int4Gate{true, kernels::Activation::silu}); },
               "(the hopper kernel was asked for)");
  if (kernels::kInt4HopperBuilt) {
    expect_error([&] { call(small_groups, nullptr, {}); }, "the hopper kernel does not serve groups of 32 columns");
  } else {
    expect_error([&] { call(whole, nullptr, {}); }, "this build has no hopper kernel");
  }
}

// Act order inside the streamed kernel: x's columns gathered through a permutation as x is
// staged give the bits of the same kernel over a copy of x gathered on the host, at 1-8 rows,
// one and several k splits, counters or a second launch, rows of x padded past K; where the
// streamed kernel does not serve (9 rows, or the ring kernel asked for) the permutation is
// refused.
TEST(Int4Weights, StreamedKernelGathersActOrderColumns) {
  const int64_t n = 72, k = 1024, group = 128;
  const ops::Weight w = ops::int4_weight(ctx(), random_gptq(n, k, group));
  const kernels::Int4Matrix km = int4_matrix_of(w, group);
  const std::vector<int32_t> perm = random_permutation(k);
  const Tensor perm_d = permutation_on_device(perm);
  for (int splits : {1, 3}) {
    for (int64_t m = 1; m <= 8; ++m) {
      const DType dt = m % 2 == 0 ? DType::f16 : DType::bf16;
      const bool counted = m % 3 != 0;
      const int64_t ldx = k + 6;
      SCOPED_TRACE(::testing::Message() << splits << " splits, " << m << " rows, " << dtype_name(dt) << (counted ? ", counters" : ""));
      ASSERT_TRUE(kernels::int4_gemv_serves(km, m, splits));
      const Tensor xh = random_host({m, ldx}, dt);
      Tensor gathered = Tensor::empty_host({m, k}, dt);
      const size_t es = dtype_size(dt);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < k; ++j)
          std::memcpy(static_cast<char*>(gathered.data_ptr()) + (r * k + j) * es,
                      static_cast<const char*>(xh.data_ptr()) + (r * ldx + perm[static_cast<size_t>(j)]) * es, es);
      const Tensor x = ctx().to_device(xh), xg = ctx().to_device(gathered);
      Tensor ws = ctx().empty({splits * m * n}, DType::f32);
      Tensor counters = ctx().to_device(Tensor::empty_host({kernels::int4_gemm_counters(km, m)}, DType::i32));
      LW_CUDA_CHECK(cudaMemsetAsync(counters.data_ptr(), 0, counters.nbytes(), ctx().stream().get()));
      auto run = [&](const Tensor& from, int64_t ld, const int32_t* x_perm) {
        Tensor y = ctx().empty({m, n}, dt);
        poison(y);
        ops::dispatch_float(dt, "test", [&]<class T>() {
          if constexpr (!std::is_same_v<T, float>)
            kernels::int4_gemm<T>(y.data<T>(), from.data<T>(), km, nullptr, m, ld, n, splits,
                                  splits > 1 ? ws.data<float>() : nullptr, counted ? counters.data<int32_t>() : nullptr,
                                  ctx().warp_size(), ctx().stream().get(), kernels::Int4GemmKernel::streamed, x_perm);
        });
        return ctx().to_host(y);
      };
      const Tensor in_kernel = run(x, ldx, perm_d.data<int32_t>()), on_copy = run(xg, k, nullptr);
      EXPECT_TRUE(bitwise_equal(in_kernel, on_copy));
      for (double v : to_doubles(in_kernel)) ASSERT_TRUE(std::isfinite(v)) << "an unwritten or non-finite output";
    }
  }
  const Tensor x = ctx().to_device(random_host({9, k}, DType::bf16));
  Tensor y = ctx().empty({9, n}, DType::bf16);
  for (auto [rows, kernel] : {std::pair<int64_t, kernels::Int4GemmKernel>{9, kernels::Int4GemmKernel::automatic},
                              {1, kernels::Int4GemmKernel::ring}}) {
    expect_error(
        [&] {
          kernels::int4_gemm<bfloat16>(y.data<bfloat16>(), x.data<bfloat16>(), km, nullptr, rows, k, n, 1, nullptr, nullptr,
                                       ctx().warp_size(), ctx().stream().get(), kernel, perm_d.data<int32_t>());
        },
        "a column permutation of x is taken by the streamed kernel only");
  }
}

// gated_linear (an MLP's down projection over its gate/up product): the streamed kernel takes
// act(gate) * up as it stages x, giving the bits of act_mul then linear, near float64 over the
// reference weights; every layout (act order in the kernel up to 4 rows, a copy first above;
// groups of 32 columns on the ring kernel), silu and both gelus; 9 rows and f32 take act_mul and
// linear (gated_linear_fuses says which).
TEST(Int4Weights, GatedLinearTakesTheProductAsItStagesX) {
  Fixture fx;
  for (const std::string& name : fx.cases()) {
    const std::vector<int64_t> shape = fx.shape(name);
    const int64_t n = shape[0], k = shape[1];
    const ops::Weight w = fx.loader(name)->get_weight(name, shape);
    const std::vector<float> wref = fx.values(name);
    for (int64_t m : {1, 3, 6, 8, 9})
      for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
        if (dt == DType::f32 && m != 3) continue;
        const ops::Activation act = m == 3   ? ops::Activation::gelu_tanh
                                    : m == 6 ? ops::Activation::gelu_erf
                                             : ops::Activation::silu;
        const bool with_bias = m % 2 == 1;
        SCOPED_TRACE(::testing::Message() << name << " " << dtype_name(dt) << " M=" << m << (with_bias ? " bias" : ""));
        const Tensor gu = ctx().to_device(random_host({m, 2 * k}, dt, -3.0, 3.0));
        const Tensor bias = with_bias ? ctx().to_device(random_host({n}, dt)) : Tensor();
        Tensor product = ctx().empty({m, k}, dt), fused = ctx().empty({m, n}, dt), apart = ctx().empty({m, n}, dt);
        poison(fused);
        poison(apart);
        ops::act_mul(ctx(), act, gu, product);
        // The kernel takes the product wherever the streamed kernel serves (the layouts of
        // whole 64-column groups or one group, up to 8 rows, act order up to 4 in the kernel).
        const bool streamed_layout = name.rfind("gptq_sym_g32", 0) != 0;
        const bool act_order = fx.manifest[name]["desc_act"].get<bool>();
        EXPECT_EQ(ops::gated_linear_fuses(ctx(), gu, w, fused),
                  dt != DType::f32 && streamed_layout && m <= (act_order ? 4 : 8));
        ops::gated_linear(ctx(), act, gu, w, bias, fused);
        ops::linear(ctx(), product, w, bias, apart);
        const Tensor got = ctx().to_host(fused);
        EXPECT_TRUE(bitwise_equal(got, ctx().to_host(apart)));
        expect_linear_near_reference(got, ctx().to_host(product), with_bias ? ctx().to_host(bias) : Tensor(), wref, n, k);
      }
  }
  const ops::Weight w = fx.loader("awq_g128.weight")->get_weight("awq_g128.weight", fx.shape("awq_g128.weight"));
  const int64_t n = w.out_features(), k = w.in_features();
  Tensor out = ctx().empty({1, n}, DType::bf16);
  expect_error([&] { ops::gated_linear(ctx(), ops::Activation::silu, ctx().empty({1, k}, DType::bf16), w, Tensor(), out); },
               "must end in 2 x in_features " + std::to_string(k));
}

// The kernel's gate over rows of x that are not 16-byte multiples apart (its 4-byte copies), with
// and without act order, in 1 and 3 splits: the bits of the kernel over act_mul's product.
// Refused on the ring kernel and with rows narrower than gate and up.
TEST(Int4Weights, StreamedKernelGatesPaddedRows) {
  const int64_t n = 72, k = 1024, group = 128, ldx = 2 * k + 6;
  const ops::Weight w = ops::int4_weight(ctx(), random_gptq(n, k, group));
  const kernels::Int4Matrix km = int4_matrix_of(w, group);
  const Tensor perm_d = permutation_on_device(random_permutation(k));
  const kernels::Int4Gate silu{true, kernels::Activation::silu};
  for (int splits : {1, 3})
    for (int64_t m = 1; m <= 8; ++m)
      for (bool act_order : {false, true}) {
        const DType dt = m % 2 == 0 ? DType::f16 : DType::bf16;
        SCOPED_TRACE(::testing::Message() << splits << " splits, " << m << " rows, " << dtype_name(dt)
                                          << (act_order ? ", act order" : ""));
        const Tensor gu_h = random_host({m, 2 * k}, dt, -4.0, 4.0);
        Tensor padded = Tensor::empty_host({m, ldx}, dt);
        const size_t es = dtype_size(dt);
        for (int64_t r = 0; r < m; ++r)
          std::memcpy(static_cast<char*>(padded.data_ptr()) + r * ldx * es,
                      static_cast<const char*>(gu_h.data_ptr()) + r * 2 * k * es, 2 * k * es);
        const Tensor gu = ctx().to_device(gu_h), x = ctx().to_device(padded);
        Tensor product = ctx().empty({m, k}, dt);
        ops::act_mul(ctx(), ops::Activation::silu, gu, product);
        Tensor ws = ctx().empty({splits * m * n}, DType::f32);
        auto run = [&](const Tensor& from, int64_t ld, kernels::Int4Gate gate) {
          Tensor y = ctx().empty({m, n}, dt);
          poison(y);
          ops::dispatch_float(dt, "test", [&]<class T>() {
            if constexpr (!std::is_same_v<T, float>)
              kernels::int4_gemm<T>(y.data<T>(), from.data<T>(), km, nullptr, m, ld, n, splits,
                                    splits > 1 ? ws.data<float>() : nullptr, nullptr, ctx().warp_size(),
                                    ctx().stream().get(), kernels::Int4GemmKernel::streamed,
                                    act_order ? perm_d.data<int32_t>() : nullptr, gate);
          });
          return ctx().to_host(y);
        };
        const Tensor gated = run(x, ldx, silu);
        EXPECT_TRUE(bitwise_equal(gated, run(product, k, {})));
        for (double v : to_doubles(gated)) ASSERT_TRUE(std::isfinite(v)) << "an unwritten or non-finite output";
      }
  const Tensor x = ctx().to_device(random_host({1, 2 * k}, DType::bf16));
  Tensor y = ctx().empty({1, n}, DType::bf16);
  auto gated = [&](int64_t ld, kernels::Int4GemmKernel kernel) {
    kernels::int4_gemm<bfloat16>(y.data<bfloat16>(), x.data<bfloat16>(), km, nullptr, 1, ld, n, 1, nullptr, nullptr,
                                 ctx().warp_size(), ctx().stream().get(), kernel, nullptr, silu);
  };
  expect_error([&] { gated(2 * k, kernels::Int4GemmKernel::ring); }, "a gated x is taken by the streamed kernel only");
  expect_error([&] { gated(k, kernels::Int4GemmKernel::automatic); }, "a gated x needs rows of gate and up");
}

// The fused kernel's splits on a 132-multiprocessor device for Llama-3-8B's projections: no
// second wave begun by a few blocks (the blocks of one row of x fit one wave of four a
// multiprocessor), splits of at least four steps, none where the row blocks alone fill a wave.
TEST(Int4Weights, SplitsFillWholeWaves) {
  struct Shape {
    int64_t n, k;
  };
  for (const Shape& sh : {Shape{6144, 4096}, Shape{4096, 4096}, Shape{28672, 4096}, Shape{4096, 14336},
                          Shape{14336, 4096}, Shape{128256, 4096}}) {
    SCOPED_TRACE(::testing::Message() << "[" << sh.n << ", " << sh.k << "]");
    const kernels::Int4Matrix w{nullptr, nullptr, nullptr, sh.n, sh.k, 128};
    const int splits = kernels::int4_gemm_splits(w, 132);
    const int64_t row_blocks = kernels::int4_gemm_counters(w, 1), slots = 4 * 132;
    EXPECT_GE(sh.k / 64 / splits, 4);
    if (row_blocks >= slots) {
      EXPECT_EQ(splits, 1);
    } else {
      EXPECT_LE(row_blocks * splits, slots);
      EXPECT_GT(row_blocks * splits, slots / 2) << splits << " splits of " << row_blocks << " row blocks";
    }
  }
}

// The dry run counts what the load keeps: whole, a rank's rows, columns of an act-order weight
// (expanded), parts stacked in whole tiles (4-bit; act-order ones with one column order) and not
// (expanded).
TEST(Int4Weights, TheDryRunCountsWhatTheLoadKeeps) {
  Fixture fx;
  auto both = [&](const std::string& name, const std::function<void(model::WeightLoader&)>& load) {
    auto real = fx.loader(name);
    ScopedEnv env("LW_WEIGHT_STORAGE", "quantized");
    model::WeightLoader d(ctx(), fx.ckpt.get(), DType::f32, true);
    d.set_quantization([&] {
      model::WeightQuantization q;
      q.method = fx.manifest[name]["method"].get<std::string>();
      q.group_size = fx.manifest[name]["group_size"].get<int64_t>();
      q.gptq_v2 = fx.manifest[name]["checkpoint_format"].get<std::string>() == "gptq_v2";
      return q;
    }());
    load(d);
    load(*real);
    EXPECT_EQ(d.bytes(), real->bytes());
  };
  const std::string g128 = "gptq_asym_g128.weight", act = "gptq_act_g64.weight";
  both(g128, [&](model::WeightLoader& ld) { ld.get_weight(g128, fx.shape(g128)); });
  both(g128, [&](model::WeightLoader& ld) { ld.get_weight(g128, fx.shape(g128), {0, 16, 48}); });
  both(act, [&](model::WeightLoader& ld) { ld.get_weight(act, fx.shape(act)); });
  both(act, [&](model::WeightLoader& ld) { ld.get_weight(act, fx.shape(act), {1, 64, 128}); });
  for (int64_t cut : {16, 40}) {
    both(g128, [&](model::WeightLoader& ld) {
      ld.fuse_weights({ld.get_weight(g128, fx.shape(g128), {0, 0, cut}), ld.get_weight(g128, fx.shape(g128), {0, cut, 48})});
    });
  }
  // Stacked act-order rows keep their one column order once.
  auto stack_act = [&](model::WeightLoader& ld) {
    return ld.fuse_weights(
        {ld.get_weight(act, fx.shape(act), {0, 0, 16}), ld.get_weight(act, fx.shape(act), {0, 16, 64})});
  };
  both(act, [&](model::WeightLoader& ld) { stack_act(ld); });
  // The real count is the device bytes of what was kept.
  auto ld = fx.loader(g128);
  const ops::Weight w = ld->get_weight(g128, fx.shape(g128));
  EXPECT_EQ(ld->bytes(), w.device_bytes());
  auto la = fx.loader(act);
  const ops::Weight stacked = stack_act(*la);
  ASSERT_EQ(stacked.format(), ops::WeightFormat::int4);
  ASSERT_TRUE(stacked.perm().defined());
  EXPECT_EQ(la->bytes(), stacked.device_bytes());
}

TEST(Int4Weights, BrokenTensorsAreRefusedByName) {
  Fixture fx;
  const std::vector<int64_t> shape{16, 64};
  expect_error([&] { fx.loader("bad_qweight.weight")->get_weight("bad_qweight.weight", shape); },
               "qweight i32[7, 16] gpu must be contiguous i32[8, 16]");
  expect_error([&] { fx.loader("bad_scales.weight")->get_weight("bad_scales.weight", shape); }, "scales");
  expect_error([&] { fx.loader("bad_gidx.weight")->get_weight("bad_gidx.weight", shape); },
               "g_idx[5] = 2 is not a group of 0..1");
  // The model's shape must be the checkpoint's.
  expect_error([&] { fx.loader("awq_g128.weight")->get_weight("awq_g128.weight", {64, 128}); }, "qweight");
  // 4-bit tensors without a config that describes them.
  ScopedEnv env("LW_WEIGHT_STORAGE", "quantized");
  model::WeightLoader plain(ctx(), fx.ckpt.get(), DType::f32, false);
  expect_error([&] { plain.get_weight("awq_g128.weight", {64, 256}); },
               "does not describe them");
  // An asymmetric pack-quantized config over tensors without zero points.
  model::WeightLoader asym(ctx(), fx.ckpt.get(), DType::f32, false);
  model::WeightQuantization q;
  q.method = "compressed-tensors";
  q.group_size = 128;
  q.int4_asymmetric = true;
  asym.set_quantization(q);
  expect_error([&] { asym.get_weight("ct_g128.weight", {48, 256}); },
               "the config's asymmetric 4-bit weights need ct_g128.weight_zero_point");
}

}  // namespace
}  // namespace lw::test
