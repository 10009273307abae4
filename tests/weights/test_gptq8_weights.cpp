// 8-bit GPTQ weights from make_fixtures.py's st_gptq8 checkpoint (symmetric with v1 and v2 zero
// points, groups of 32 and 64, a last partial group, one group per row; asymmetric; act-order),
// quantised and packed in Python by AutoGPTQ's rules. Every case loads as
// ops::Weight::int8_per_group (zero points where asymmetric, columns sorted by group where in
// act order) and holds exactly the reference values; linear (the 8-bit GEMV and the expansion)
// matches a float64 reference; shards and stacked parts keep what they should; the dry run
// counts what the load keeps; broken tensors are refused by name.
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "model/weight_loader.h"
#include "ops/gemm.h"
#include "ops/weight.h"
#include "test_util.h"
#include "weights/checkpoint.h"
#include "weights/fixture_values.h"
#include "weights/weight_values.h"

namespace lw::test {
namespace {

const std::string kDir = LW_WEIGHTS_FIXTURES;

struct Fixture : FixtureCheckpoint {
  Fixture() : FixtureCheckpoint(kDir, "st_gptq8") {}
  model::WeightQuantization quantization(const std::string& name) const {
    model::WeightQuantization q;
    q.method = "gptq";
    q.gptq_bits = 8;
    q.group_size = manifest[name]["group_size"].get<int64_t>();
    q.gptq_v2 = manifest[name]["checkpoint_format"].get<std::string>() == "gptq_v2";
    return q;
  }
  // A loader set up as the case's config.json would set it (dry: counting only).
  std::unique_ptr<model::WeightLoader> loader(const std::string& name, const char* storage = "quantized",
                                              bool dry = false) const {
    ScopedEnv env("LW_WEIGHT_STORAGE", storage);
    auto ld = std::make_unique<model::WeightLoader>(ctx(), ckpt.get(), DType::f32, dry);
    ld->set_quantization(quantization(name));
    return ld;
  }
  bool symmetric(const std::string& name) const { return manifest[name]["sym"].get<bool>(); }
  bool act_order(const std::string& name) const { return manifest[name]["desc_act"].get<bool>(); }
};

TEST(Gptq8Weights, EveryCaseLoadsToTheReferenceValues) {
  Fixture fx;
  ASSERT_EQ(fx.cases().size(), 8u);
  for (const std::string& name : fx.cases()) {
    SCOPED_TRACE(name);
    const std::vector<int64_t> shape = fx.shape(name);
    const int64_t n = shape[0], k = shape[1];
    const ops::Weight w = fx.loader(name)->get_weight(name, shape);
    ASSERT_EQ(w.format(), ops::WeightFormat::int8_per_group);
    const int64_t g = fx.manifest[name]["group_size"].get<int64_t>(), group = g < 0 ? k : g;
    EXPECT_EQ(w.group_size(), group);
    EXPECT_EQ(w.data().nbytes(), static_cast<size_t>(n * k));
    EXPECT_EQ(w.scales().shape(), std::vector<int64_t>({n, (k + group - 1) / group}));
    EXPECT_EQ(w.zeros().defined(), !fx.symmetric(name));
    EXPECT_EQ(w.perm().defined(), fx.act_order(name));
    expect_kept_and_dense(w, fx.loader(name, "dense")->get_weight(name, shape), fx.values(name));
  }
}

// y = x W^T + b against float64 over the reference values: the 8-bit GEMV (up to 4 rows and on
// the forced gemv path; K a multiple of 16) and the expansion (more rows, K = 136, the tiled
// GEMM). The GEMV multiplies exact weights in fp32; the expansion rounds each weight to x's
// dtype once.
TEST(Gptq8Weights, LinearMatchesTheFloat64Reference) {
  Fixture fx;
  struct Case {
    int64_t m;
    ops::GemmPath path;
  };
  const Case cases[] = {{1, ops::GemmPath::automatic}, {4, ops::GemmPath::automatic}, {9, ops::GemmPath::automatic},
                        {7, ops::GemmPath::gemv},      {3, ops::GemmPath::tiled}};
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
        ops::linear(ctx(), ctx().to_device(xh), w, with_bias ? ctx().to_device(bh) : Tensor(), out, c.path);
        expect_linear_near_reference(ctx().to_host(out), xh, with_bias ? bh : Tensor(), wref, n, k);
      }
  }
}

// A rank's rows stay 8-bit; columns stay 8-bit on group edges and are expanded where they cut a
// group; act-order weights keep their rows and expand columns (groups scattered over K); parts
// stack by rows, zero points and a shared column order with them.
TEST(Gptq8Weights, ShardsAndStackedParts) {
  Fixture fx;
  const std::string name = "gptq8_sym_g64_tail.weight";  // [32, 208], groups of 64 and a last of 16
  const std::vector<float> ref = fx.values(name);
  auto part = [&](const std::string& which, model::WeightLoader::Part p) {
    return fx.loader(which)->get_weight(which, fx.shape(which), p);
  };
  const ops::Weight rows = part(name, {0, 4, 20});
  EXPECT_EQ(rows.format(), ops::WeightFormat::int8_per_group);
  expect_values(rows, ref, 208, 4, 20, 0, 208);
  const ops::Weight cols = part(name, {1, 64, 208});
  EXPECT_EQ(cols.format(), ops::WeightFormat::int8_per_group);
  expect_values(cols, ref, 208, 0, 32, 64, 208);
  const ops::Weight cut = part(name, {1, 32, 160});
  EXPECT_EQ(cut.format(), ops::WeightFormat::dense);
  expect_values(cut, ref, 208, 0, 32, 32, 160);
  const std::string act = "gptq8_act_g32.weight";  // [48, 128]
  const ops::Weight act_rows = part(act, {0, 8, 40});
  EXPECT_EQ(act_rows.format(), ops::WeightFormat::int8_per_group);
  EXPECT_TRUE(act_rows.perm().defined());
  expect_values(act_rows, fx.values(act), 128, 8, 40, 0, 128);
  const ops::Weight act_cols = part(act, {1, 32, 96});
  EXPECT_EQ(act_cols.format(), ops::WeightFormat::dense);
  expect_values(act_cols, fx.values(act), 128, 0, 48, 32, 96);
  const std::string asym = "gptq8_asym_g64.weight";  // [32, 192]
  const ops::Weight asym_cols = part(asym, {1, 64, 192});
  EXPECT_EQ(asym_cols.format(), ops::WeightFormat::int8_per_group);
  EXPECT_TRUE(asym_cols.zeros().defined());
  expect_values(asym_cols, fx.values(asym), 192, 0, 32, 64, 192);
  {
    auto la = fx.loader(act);
    const ops::Weight stacked_act = la->fuse_weights({part(act, {0, 0, 20}), part(act, {0, 20, 48})});
    EXPECT_EQ(stacked_act.format(), ops::WeightFormat::int8_per_group);
    EXPECT_TRUE(stacked_act.perm().defined());
    expect_values(stacked_act, fx.values(act), 128, 0, 48, 0, 128);
    auto ls = fx.loader(asym);
    const ops::Weight stacked_asym = ls->fuse_weights({part(asym, {0, 0, 8}), part(asym, {0, 8, 32})});
    EXPECT_EQ(stacked_asym.format(), ops::WeightFormat::int8_per_group);
    EXPECT_TRUE(stacked_asym.zeros().defined());
    expect_values(stacked_asym, fx.values(asym), 192, 0, 32, 0, 192);
    // The stacked weights through the 8-bit GEMV (x's columns gathered for the act-order one).
    for (const auto& [stacked, which] : {std::pair{stacked_act, act}, std::pair{stacked_asym, asym}}) {
      SCOPED_TRACE(which);
      const int64_t n = stacked.out_features(), k = stacked.in_features();
      const Tensor xh = random_host({2, k}, DType::f32);
      Tensor out = ctx().empty({2, n}, DType::f32);
      poison(out);
      ops::linear(ctx(), ctx().to_device(xh), stacked, Tensor(), out, ops::GemmPath::gemv);
      expect_linear_near_reference(ctx().to_host(out), xh, Tensor(), fx.values(which), n, k);
    }
  }

  auto ld = fx.loader(name);
  const ops::Weight stacked = ld->fuse_weights({part(name, {0, 0, 12}), part(name, {0, 12, 32})});
  EXPECT_EQ(stacked.format(), ops::WeightFormat::int8_per_group);
  EXPECT_EQ(stacked.group_size(), 64);
  expect_values(stacked, ref, 208, 0, 32, 0, 208);
  // Parts of different formats (int8 with groups of 32, a dense cut) expand into one matrix.
  const std::string g32 = "gptq8_sym_g32.weight";  // [40, 96]
  const ops::Weight other = fx.loader(g32)->get_weight(g32, fx.shape(g32));
  const ops::Weight first = part(name, {1, 0, 96});
  ASSERT_EQ(first.format(), ops::WeightFormat::dense);  // 96 cuts a group of 64
  const ops::Weight mixed = ld->fuse_weights({other, first});
  ASSERT_EQ(mixed.format(), ops::WeightFormat::dense);
  expect_values(ops::Weight::dense(mixed.data().slice(0, 0, 40)), fx.values(g32), 96, 0, 40, 0, 96);
  expect_values(ops::Weight::dense(mixed.data().slice(0, 40, 72)), ref, 208, 0, 32, 0, 96);
}

// The dry run counts what the load keeps: kept whole (with zero points, with a permutation), a
// rank's rows and columns, expanded weights (a cut group, act-order columns), stacked parts.
TEST(Gptq8Weights, TheDryRunCountsWhatTheLoadKeeps) {
  Fixture fx;
  auto both = [&](const std::string& name, const std::function<void(model::WeightLoader&)>& load) {
    SCOPED_TRACE(name);
    auto real = fx.loader(name);
    auto dry = fx.loader(name, "quantized", true);
    load(*dry);
    load(*real);
    EXPECT_EQ(dry->bytes(), real->bytes());
  };
  for (const std::string& name : fx.cases()) {
    both(name, [&](model::WeightLoader& ld) { ld.get_weight(name, fx.shape(name)); });
    both(name, [&](model::WeightLoader& ld) { ld.get_weight(name, fx.shape(name), {0, 4, 16}); });
  }
  const std::string tail = "gptq8_sym_g64_tail.weight";
  both(tail, [&](model::WeightLoader& ld) { ld.get_weight(tail, fx.shape(tail), {1, 128, 208}); });
  both(tail, [&](model::WeightLoader& ld) { ld.get_weight(tail, fx.shape(tail), {1, 32, 160}); });
  both(tail, [&](model::WeightLoader& ld) {
    ld.fuse_weights({ld.get_weight(tail, fx.shape(tail), {0, 0, 12}), ld.get_weight(tail, fx.shape(tail), {0, 12, 32})});
  });
  const std::string act = "gptq8_act_g32.weight";
  both(act, [&](model::WeightLoader& ld) { ld.get_weight(act, fx.shape(act), {1, 32, 96}); });
  // The real count is the device bytes of what was kept.
  for (const std::string& name : fx.cases()) {
    SCOPED_TRACE(name);
    auto ld = fx.loader(name);
    const ops::Weight w = ld->get_weight(name, fx.shape(name));
    EXPECT_EQ(ld->bytes(), w.device_bytes());
  }
  // Stacked parts, counted by the dry run as the load keeps them, which is what the device
  // holds: one shared column order once, zero points added for the part without them, parts of
  // two column orders expanded.
  const std::string asym = "gptq8_asym_g64.weight", sym = "gptq8_sym_g64.weight", act2 = "gptq8_act2_g32.weight";
  const std::vector<std::pair<std::string, std::function<ops::Weight(model::WeightLoader&)>>> stacks = {
      {act, [&](model::WeightLoader& ld) {
         return ld.fuse_weights({ld.get_weight(act, fx.shape(act), {0, 0, 16}),
                                 ld.get_weight(act, fx.shape(act), {0, 16, 32}),
                                 ld.get_weight(act, fx.shape(act), {0, 32, 48})});
       }},
      {asym, [&](model::WeightLoader& ld) {
         return ld.fuse_weights({ld.get_weight(sym, fx.shape(sym)), ld.get_weight(asym, fx.shape(asym))});
       }},
      {act, [&](model::WeightLoader& ld) {
         return ld.fuse_weights({ld.get_weight(act, fx.shape(act)), ld.get_weight(act2, fx.shape(act2))});
       }},
  };
  const ops::WeightFormat want[] = {ops::WeightFormat::int8_per_group, ops::WeightFormat::int8_per_group,
                                    ops::WeightFormat::dense};
  for (size_t i = 0; i < stacks.size(); ++i) {
    const auto& [config, stack] = stacks[i];
    SCOPED_TRACE(i);
    auto real = fx.loader(config);
    auto dry = fx.loader(config, "quantized", true);
    stack(*dry);
    const ops::Weight w = stack(*real);
    ASSERT_EQ(w.format(), want[i]);
    EXPECT_EQ(dry->bytes(), real->bytes());
    EXPECT_EQ(real->bytes(), w.device_bytes());
  }
}

TEST(Gptq8Weights, BrokenTensorsAreRefusedByName) {
  Fixture fx;
  const std::vector<int64_t> shape{16, 64};
  expect_error([&] { fx.loader("bad8_qweight.weight")->get_weight("bad8_qweight.weight", shape); },
               "bad8_qweight.qweight is I32[15, 16]; 8-bit GPTQ [16, 64] in groups of 32 needs I32[16, 16]");
  expect_error([&] { fx.loader("bad8_zeros.weight")->get_weight("bad8_zeros.weight", shape); },
               "bad8_zeros.qzeros is I32[1, 4]; 8-bit GPTQ [16, 64] in groups of 32 needs I32[2, 4]");
  expect_error([&] { fx.loader("bad8_gidx.weight")->get_weight("bad8_gidx.weight", shape); },
               "bad8_gidx.g_idx[5] = 2 is not a group of 0..1");
  // The model's shape must be the checkpoint's; N and K whole words.
  expect_error([&] { fx.loader("gptq8_sym_g32.weight")->get_weight("gptq8_sym_g32.weight", {40, 64}); },
               "gptq8_sym_g32.qweight is I32[24, 40]");
  expect_error([&] { fx.loader("gptq8_sym_g32.weight")->get_weight("gptq8_sym_g32.weight", {42, 96}); },
               "[42, 96] is not whole words");
}

}  // namespace
}  // namespace lw::test
