// Rotary embedding against a float64 reference (angles formed in float, as Hugging Face
// forms them), on q/k views into a fused QKV buffer, for both pair layouts, partial rotary
// dimensions and every scaling type; the frequency tables against Hugging Face's own.
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ops/attention.h"
#include "ops/copy.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "round_to.h"
#include "test_util.h"

namespace lw::test {
namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

struct Shape {
  int64_t tokens;
  int q_heads, k_heads, head_dim;
};

// out_of_place: q's rotated heads go to a tensor of their own (the fused buffer's q part must
// then stay as it was).
void run_case(const ops::RopeConfig& cfg, DType dt, const Shape& s, DType pos_dt, bool out_of_place = false) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", rot " << cfg.rotary_dim << "/" << s.head_dim
                                    << (cfg.neox ? " neox" : " gptj") << ", scaling " << static_cast<int>(cfg.scaling)
                                    << ", " << s.tokens << " tokens, heads " << s.q_heads << "/" << s.k_heads);
  ops::Rope rope(ctx(), cfg);
  const int64_t width = static_cast<int64_t>(s.q_heads + 2 * s.k_heads) * s.head_dim;  // q | k | v
  Tensor qkv_h = random_host({s.tokens, width}, dt, -2, 2);
  Tensor pos_h = Tensor::empty_host({s.tokens}, pos_dt);
  std::vector<int64_t> pos(static_cast<size_t>(s.tokens));
  for (int64_t t = 0; t < s.tokens; ++t) {
    pos[t] = static_cast<int64_t>(rng()() % 40000);
    if (pos_dt == DType::i32) pos_h.data<int32_t>()[t] = static_cast<int32_t>(pos[t]);
    else pos_h.data<int64_t>()[t] = pos[t];
  }
  Tensor qkv = ctx().to_device(qkv_h), positions = ctx().to_device(pos_h);
  const int64_t qw = static_cast<int64_t>(s.q_heads) * s.head_dim, kw = static_cast<int64_t>(s.k_heads) * s.head_dim;
  Tensor q = qkv.slice(1, 0, qw).unflatten(1, {s.q_heads, s.head_dim});
  Tensor k = qkv.slice(1, qw, qw + kw).unflatten(1, {s.k_heads, s.head_dim});
  Tensor q_out;
  if (out_of_place) {
    q_out = ctx().empty({s.tokens, s.q_heads, s.head_dim}, dt);
    poison(q_out);
  }
  rope.apply(ctx(), q, k, positions, q_out);
  Tensor got = ctx().to_host(qkv);

  const std::vector<double> x = to_doubles(qkv_h);
  std::vector<double> want = x;
  const int half = cfg.rotary_dim / 2;
  double max_angle = 0;
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int h = 0; h < s.q_heads + s.k_heads; ++h) {
      const int64_t base = t * width + static_cast<int64_t>(h) * s.head_dim;
      for (int i = 0; i < half; ++i) {
        const double angle = static_cast<float>(static_cast<float>(pos[t]) * rope.inv_freq()[i]);
        max_angle = std::max(max_angle, angle);
        const double c = std::cos(angle) * rope.mscale(), sn = std::sin(angle) * rope.mscale();
        const int64_t i0 = base + (cfg.neox ? i : 2 * i), i1 = base + (cfg.neox ? i + half : 2 * i + 1);
        want[i0] = x[i0] * c - x[i1] * sn;
        want[i1] = x[i1] * c + x[i0] * sn;
      }
    }
  }
  // One rounding to the dtype, plus float sincos of angles up to ~4e4 (range reduction is
  // exact, so a few ulps of the angle's float rounding are all that remains).
  const double abs = 4 * std::ldexp(max_angle, -24) * 2 * rope.mscale() + 1e-6;
  if (out_of_place) {
    // The rotated queries from q_out, the fused buffer's queries unchanged.
    std::vector<double> want_q, want_rest = want;
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int64_t e = 0; e < qw; ++e) {
        want_q.push_back(want[t * width + e]);
        want_rest[t * width + e] = x[t * width + e];
      }
    }
    EXPECT_TRUE(all_close(ctx().to_host(q_out), want_q, epsilon(dt) * 2, abs));
    EXPECT_TRUE(all_close(got, want_rest, epsilon(dt) * 2, abs));
    return;
  }
  EXPECT_TRUE(all_close(got, want, epsilon(dt) * 2, abs));
}

TEST(Rope, NeoxAndGptjFullAndPartialRotary) {
  for (DType dt : kFloatTypes) {
    for (bool neox : {true, false}) {
      ops::RopeConfig cfg;
      cfg.neox = neox;
      for (bool out_of_place : {false, true}) {
        cfg.rotary_dim = 64;
        cfg.theta = 10000;
        run_case(cfg, dt, {5, 4, 2, 64}, DType::i64, out_of_place);
        cfg.rotary_dim = 32;  // partial: the second half of each head stays as it is (copied out of place)
        run_case(cfg, dt, {3, 3, 1, 80}, DType::i32, out_of_place);
        cfg.rotary_dim = 128;
        cfg.theta = 500000;
        run_case(cfg, dt, {2, 8, 8, 128}, DType::i64, out_of_place);
        cfg.rotary_dim = 6;  // three pairs: no vector path
        run_case(cfg, dt, {3, 2, 1, 10}, DType::i32, out_of_place);
      }
    }
  }
}

TEST(Rope, ScalingTypes) {
  ops::RopeConfig linear;
  linear.rotary_dim = 64;
  linear.scaling = ops::RopeScaling::linear;
  linear.factor = 4;
  ops::RopeConfig llama3;
  llama3.rotary_dim = 128;
  llama3.theta = 500000;
  llama3.scaling = ops::RopeScaling::llama3;
  llama3.factor = 8;
  ops::RopeConfig yarn;
  yarn.rotary_dim = 64;
  yarn.theta = 10000;
  yarn.scaling = ops::RopeScaling::yarn;
  yarn.factor = 4;
  yarn.original_max_position = 4096;
  for (const auto& cfg : {linear, llama3, yarn}) run_case(cfg, DType::bf16, {4, 4, 2, cfg.rotary_dim}, DType::i64);
  EXPECT_NEAR(ops::Rope(ctx(), yarn).mscale(), 0.1 * std::log(4.0) + 1, 1e-6);
}

TEST(Rope, QueriesOnlyAndOneToken) {
  ops::RopeConfig cfg;
  cfg.rotary_dim = 16;
  ops::Rope rope(ctx(), cfg);
  Tensor qh = random_host({1, 3, 16}, DType::f32);
  Tensor q = ctx().to_device(qh);
  Tensor pos_h = Tensor::empty_host({1}, DType::i32);
  pos_h.data<int32_t>()[0] = 0;  // position 0: the identity rotation
  rope.apply(ctx(), q, Tensor(), ctx().to_device(pos_h));
  EXPECT_TRUE(bitwise_equal(ctx().to_host(q), qh));
}

// Frequency tables against Hugging Face transformers' ROPE_INIT_FUNCTIONS, recorded by
// tools/rope_reference.py (run where transformers is installed) into tests/data.
TEST(Rope, FrequencyTablesMatchHuggingFace) {
  std::ifstream f(LW_TEST_DATA_DIR "/rope_hf_reference.json");
  ASSERT_TRUE(f.good()) << "missing " LW_TEST_DATA_DIR "/rope_hf_reference.json";
  const nlohmann::json cases = nlohmann::json::parse(f);
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    ops::RopeConfig cfg;
    cfg.rotary_dim = c["rotary_dim"];
    cfg.theta = c["theta"];
    const std::string type = c["rope_type"];
    cfg.scaling = type == "linear" ? ops::RopeScaling::linear
                  : type == "llama3" ? ops::RopeScaling::llama3
                  : type == "yarn"   ? ops::RopeScaling::yarn
                                     : ops::RopeScaling::none;
    cfg.factor = c.value("factor", 1.0);
    cfg.low_freq_factor = c.value("low_freq_factor", 1.0);
    cfg.high_freq_factor = c.value("high_freq_factor", 4.0);
    cfg.original_max_position = c.value("original_max_position_embeddings", int64_t{8192});
    cfg.beta_fast = c.value("beta_fast", 32.0);
    cfg.beta_slow = c.value("beta_slow", 1.0);
    ops::Rope rope(ctx(), cfg);
    const std::vector<double> hf = c["inv_freq"];
    ASSERT_EQ(rope.inv_freq().size(), hf.size());
    for (size_t i = 0; i < hf.size(); ++i) EXPECT_NEAR(rope.inv_freq()[i], hf[i], 2e-6 * hf[i]) << "pair " << i;
    EXPECT_NEAR(rope.mscale(), c["attention_factor"].get<double>(), 1e-6);
  }
}

// Qwen3's per-head q_norm / k_norm in the rotation's launch: every head RMS-normalised with its
// weights (the normalised value and its product with the weight each rounded to the dtype, as
// rms_norm rounds them), then rotated; against float64 (those roundings replayed, the sum of
// squares exact) and against rms_norm per head followed by rope. Full and partial rotary dims
// (the others normalised, not rotated), both pair layouts, in place and into q_out, queries alone.
TEST(Rope, HeadNormBeforeTheRotation) {
  struct Case {
    int rotary_dim, head_dim, q_heads, k_heads;
    bool neox, out_of_place;
  };
  const Case cases[] = {{128, 128, 8, 2, true, true},  {64, 64, 4, 4, false, false}, {32, 80, 3, 1, true, false},
                        {32, 80, 3, 1, false, true},  {6, 10, 2, 1, true, true},     {64, 64, 5, 0, true, true}};
  for (DType dt : kFloatTypes)
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", rot " << c.rotary_dim << "/" << c.head_dim << ", heads "
                                        << c.q_heads << "/" << c.k_heads << (c.neox ? " neox" : " gptj")
                                        << (c.out_of_place ? " q_out" : " in place"));
      ops::RopeConfig cfg;
      cfg.rotary_dim = c.rotary_dim;
      cfg.neox = c.neox;
      ops::Rope rope(ctx(), cfg);
      const int64_t tokens = 4, d = c.head_dim, qw = c.q_heads * d, kw = c.k_heads * d, width = qw + 2 * kw;
      const Tensor qkv_h = random_host({tokens, width}, dt, -3, 3);
      const Tensor qw_h = random_host({d}, dt, 0.5, 1.5), kw_h = random_host({d}, dt, 0.5, 1.5);
      Tensor pos_h = Tensor::empty_host({tokens}, DType::i64);
      for (int64_t t = 0; t < tokens; ++t) pos_h.data<int64_t>()[t] = static_cast<int64_t>(rng()() % 5000);
      const Tensor positions = ctx().to_device(pos_h);
      const float eps = 1e-6f;
      const ops::HeadNorm norm{ctx().to_device(qw_h), c.k_heads ? ctx().to_device(kw_h) : Tensor(), eps};
      auto views = [&](const Tensor& qkv) {
        return std::pair{qkv.slice(1, 0, qw).unflatten(1, {c.q_heads, d}),
                         c.k_heads ? qkv.slice(1, qw, qw + kw).unflatten(1, {c.k_heads, d}) : Tensor()};
      };
      // Fused.
      Tensor fused = ctx().to_device(qkv_h);
      auto [q, k] = views(fused);
      Tensor q_out = c.out_of_place ? ctx().empty({tokens, c.q_heads, d}, dt) : Tensor();
      rope.apply(ctx(), q, k, positions, q_out, &norm);
      const Tensor got_q = ctx().to_host(c.out_of_place ? q_out : ops::contiguous(ctx(), q));
      const Tensor got_k = c.k_heads ? ctx().to_host(ops::contiguous(ctx(), k)) : Tensor();
      if (c.out_of_place)  // the fused buffer's queries stay as they were
        EXPECT_TRUE(bitwise_equal(ctx().to_host(ops::contiguous(ctx(), q)), ctx().to_host(ops::contiguous(ctx(), views(ctx().to_device(qkv_h)).first))));
      // rms_norm per head, then rope.
      Tensor two = ctx().to_device(qkv_h);
      auto [q2, k2] = views(two);
      Tensor qn = ctx().empty({tokens, c.q_heads, d}, dt);
      ops::rms_norm(ctx(), ops::contiguous(ctx(), q2), norm.q_weight, eps, qn);
      Tensor kn;
      if (c.k_heads) {
        kn = ctx().empty({tokens, c.k_heads, d}, dt);
        ops::rms_norm(ctx(), ops::contiguous(ctx(), k2), norm.k_weight, eps, kn);
      }
      rope.apply(ctx(), qn, kn, positions);

      // float64, the roundings to the dtype replayed.
      const std::vector<double> x = to_doubles(qkv_h), wq = to_doubles(qw_h), wk = to_doubles(kw_h);
      const int half = c.rotary_dim / 2;
      for (int h = 0; h < c.q_heads + c.k_heads; ++h) {
        const bool query = h < c.q_heads;
        const Tensor& got = query ? got_q : got_k;
        const Tensor unfused = ctx().to_host(query ? qn : kn);
        const int hh = query ? h : h - c.q_heads;
        const int heads = query ? c.q_heads : c.k_heads;
        for (int64_t t = 0; t < tokens; ++t) {
          const int64_t base = t * width + static_cast<int64_t>(h) * d;
          double sq = 0;
          for (int64_t e = 0; e < d; ++e) sq += x[base + e] * x[base + e];
          const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps);
          std::vector<double> n(static_cast<size_t>(d)), mag(static_cast<size_t>(d));
          for (int64_t e = 0; e < d; ++e) {
            const double normed = round_to(dt, x[base + e] * rstd);
            n[e] = round_to(dt, normed * (query ? wq : wk)[e]);
          }
          std::vector<double> want = n;
          for (int64_t e = 0; e < d; ++e) mag[e] = std::abs(n[e]);
          const double angle0 = static_cast<double>(pos_h.data<int64_t>()[t]);
          for (int i = 0; i < half; ++i) {
            const double angle = static_cast<float>(static_cast<float>(angle0) * rope.inv_freq()[i]);
            const double cs = std::cos(angle), sn = std::sin(angle);
            const int i0 = c.neox ? i : 2 * i, i1 = c.neox ? i + half : 2 * i + 1;
            want[i0] = n[i0] * cs - n[i1] * sn;
            want[i1] = n[i1] * cs + n[i0] * sn;
            mag[i0] = mag[i1] = std::abs(n[i0]) + std::abs(n[i1]);
          }
          for (int64_t e = 0; e < d; ++e) {
            const int64_t at = (t * heads + hh) * d + e;
            // A float rstd may round a normalised value the other way: one unit of the dtype
            // in each of two roundings, then the rotation's.
            const double tol = 4 * epsilon(dt) * mag[e] + 2e-6 * mag[e] + 1e-6;  // f32: rsqrtf and sincosf, a few ulps
            ASSERT_LE(std::abs(element(got, at) - want[e]), tol) << "head " << h << ", token " << t << ", dim " << e;
            ASSERT_LE(std::abs(element(got, at) - element(unfused, at)), tol) << "against rms_norm + rope: head " << h;
          }
        }
      }
    }
}

// RoPE writing the rotated keys and the values into a paged cache in its launch: the same bits as
// rope() then kv_write (the engine's unchecked slots: -1 and a slot past the cache write
// nothing), k left as it was; with and without head norms, partial and GPT-J rotations, odd
// head sizes (the scalar kernel), int32 and int64 positions.
TEST(Rope, CacheWriteGivesRopeThenKvWrite) {
  struct Case {
    int rotary_dim, head_dim, q_heads, k_heads;
    bool neox, norm;
  };
  const Case cases[] = {{128, 128, 8, 2, true, false}, {64, 64, 4, 4, false, true}, {32, 80, 3, 1, true, true},
                        {6, 10, 2, 1, false, false},   {8, 24, 2, 2, true, false}};
  for (DType dt : kFloatTypes)
    for (const Case& c : cases)
      for (DType pos_dt : {DType::i32, DType::i64}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", rot " << c.rotary_dim << "/" << c.head_dim << ", heads "
                                          << c.q_heads << "/" << c.k_heads << (c.neox ? " neox" : " gptj")
                                          << (c.norm ? " norm" : "") << " " << dtype_name(pos_dt));
        ops::RopeConfig cfg;
        cfg.rotary_dim = c.rotary_dim;
        cfg.neox = c.neox;
        ops::Rope rope(ctx(), cfg);
        const int64_t tokens = 6, d = c.head_dim, qw = c.q_heads * d, kw = c.k_heads * d, width = qw + 2 * kw;
        const int64_t blocks = 3, bs = 4;
        const Tensor qkv_h = random_host({tokens, width}, dt, -3, 3);
        const Tensor cache_h = random_host({2, blocks, bs, c.k_heads, d}, dt);
        Tensor pos_h = Tensor::empty_host({tokens}, pos_dt);
        for (int64_t t = 0; t < tokens; ++t) {
          const auto p = static_cast<int64_t>(rng()() % 5000);
          if (pos_dt == DType::i32) pos_h.data<int32_t>()[t] = static_cast<int32_t>(p);
          else pos_h.data<int64_t>()[t] = p;
        }
        const int64_t slot_list[tokens] = {5, -1, 0, 11, blocks * bs, 7};
        Tensor slots_h = Tensor::empty_host({tokens}, DType::i64);
        std::copy(slot_list, slot_list + tokens, slots_h.data<int64_t>());
        const Tensor positions = ctx().to_device(pos_h), slots = ctx().to_device(slots_h);
        const ops::HeadNorm norm{ctx().to_device(random_host({d}, dt, 0.5, 1.5)), ctx().to_device(random_host({d}, dt, 0.5, 1.5)),
                                 1e-6f};
        struct Run {
          Tensor qkv, q_out, k_cache, v_cache;
        };
        auto start = [&] {
          Run r{ctx().to_device(qkv_h), ctx().empty({tokens, c.q_heads, d}, dt), Tensor(), Tensor()};
          const Tensor caches = ctx().to_device(cache_h);
          r.k_cache = caches.select(0, 0);
          r.v_cache = caches.select(0, 1);
          return r;
        };
        auto q_of = [&](const Tensor& qkv) { return qkv.slice(1, 0, qw).unflatten(1, {c.q_heads, d}); };
        auto k_of = [&](const Tensor& qkv) { return qkv.slice(1, qw, qw + kw).unflatten(1, {c.k_heads, d}); };
        auto v_of = [&](const Tensor& qkv) { return qkv.slice(1, qw + kw, width).unflatten(1, {c.k_heads, d}); };
        const ops::HeadNorm* n = c.norm ? &norm : nullptr;

        Run two = start();
        rope.apply(ctx(), q_of(two.qkv), k_of(two.qkv), positions, two.q_out, n);
        ops::kv_write(ctx(), k_of(two.qkv), v_of(two.qkv), slots, two.k_cache, two.v_cache, false);

        Run one = start();
        const ops::RopeCacheRows rows{v_of(one.qkv), slots, one.k_cache, one.v_cache};
        rope.apply(ctx(), q_of(one.qkv), k_of(one.qkv), positions, one.q_out, n, &rows);

        EXPECT_TRUE(bitwise_equal(ctx().to_host(one.q_out), ctx().to_host(two.q_out)));
        EXPECT_TRUE(bitwise_equal(ctx().to_host(ops::contiguous(ctx(), one.k_cache)), ctx().to_host(ops::contiguous(ctx(), two.k_cache))));
        EXPECT_TRUE(bitwise_equal(ctx().to_host(ops::contiguous(ctx(), one.v_cache)), ctx().to_host(ops::contiguous(ctx(), two.v_cache))));
        EXPECT_TRUE(bitwise_equal(ctx().to_host(one.qkv), qkv_h)) << "q, k and v of the fused buffer changed";
        // The slots written at all (the reference path's own check): 5, 0, 11 and 7 of 12.
        const Tensor before = ctx().to_host(ctx().to_device(cache_h).select(0, 0));
        const Tensor after = ctx().to_host(ops::contiguous(ctx(), two.k_cache));
        int changed = 0;
        for (int64_t s = 0; s < blocks * bs; ++s)
          changed += !bitwise_equal(before.view({blocks * bs, c.k_heads * d}).slice(0, s, s + 1),
                                    after.view({blocks * bs, c.k_heads * d}).slice(0, s, s + 1));
        EXPECT_EQ(changed, 4);
      }
}

TEST(Rope, RejectsMisuse) {
  ops::RopeConfig bad;
  bad.rotary_dim = 7;
  EXPECT_THROW(ops::Rope(ctx(), bad), Error);
  bad.rotary_dim = 64;
  bad.scaling = ops::RopeScaling::llama3;
  bad.factor = 8;
  bad.low_freq_factor = 4;
  bad.high_freq_factor = 1;
  EXPECT_THROW(ops::Rope(ctx(), bad), Error);
  ops::RopeConfig cfg;
  cfg.rotary_dim = 64;
  ops::Rope rope(ctx(), cfg);
  Tensor q = ctx().empty({2, 4, 32}, DType::bf16);  // head_dim < rotary_dim
  Tensor pos = ctx().empty({2}, DType::i64);
  EXPECT_THROW(rope.apply(ctx(), q, Tensor(), pos), Error);
  Tensor q64 = ctx().empty({2, 4, 64}, DType::bf16), pos_f = ctx().empty({2}, DType::f32), pos3 = ctx().empty({3}, DType::i64);
  EXPECT_THROW(rope.apply(ctx(), q64, Tensor(), pos_f), Error);
  EXPECT_THROW(rope.apply(ctx(), q64, Tensor(), pos3), Error);
  Tensor k_f16 = ctx().empty({2, 1, 64}, DType::f16);
  EXPECT_THROW(rope.apply(ctx(), q64, k_f16, pos), Error);
  // q_out: q's shape and dtype, and memory of its own.
  Tensor qkv = ctx().empty({2, 6 * 64}, DType::bf16);
  const Tensor qv = qkv.slice(1, 0, 4 * 64).unflatten(1, {4, 64}), kv = qkv.slice(1, 4 * 64, 5 * 64).unflatten(1, {1, 64});
  EXPECT_THROW(rope.apply(ctx(), qv, kv, pos, ctx().empty({2, 4, 64}, DType::f16)), Error);
  EXPECT_THROW(rope.apply(ctx(), qv, kv, pos, ctx().empty({2, 3, 64}, DType::bf16)), Error);
  expect_error([&] { rope.apply(ctx(), qv, kv, pos, qkv.slice(1, 2 * 64, 6 * 64).unflatten(1, {4, 64})); },
               "overlaps q or k");
  // Head norm weights of the head's size and q's dtype, for k too where there is k.
  const ops::HeadNorm short_weights{ctx().empty({32}, DType::bf16), ctx().empty({64}, DType::bf16)};
  expect_error([&] { rope.apply(ctx(), qv, kv, pos, Tensor(), &short_weights); }, "must be a contiguous [64]");
  const ops::HeadNorm f16_weights{ctx().empty({64}, DType::f16), ctx().empty({64}, DType::f16)};
  EXPECT_THROW(rope.apply(ctx(), qv, kv, pos, Tensor(), &f16_weights), Error);
  const ops::HeadNorm no_k{ctx().empty({64}, DType::bf16), Tensor()};
  EXPECT_THROW(rope.apply(ctx(), qv, kv, pos, Tensor(), &no_k), Error);
  // A cache write: v of k's shape, caches of k's dtype and head shape, i64 slots per token.
  const Tensor vv = qkv.slice(1, 5 * 64, 6 * 64).unflatten(1, {1, 64});
  const Tensor cache = ctx().empty({2, 16, 1, 64}, DType::bf16), slots = ctx().empty({2}, DType::i64);
  const ops::RopeCacheRows good{vv, slots, cache, cache};
  const ops::RopeCacheRows f16_cache{vv, slots, ctx().empty({2, 16, 1, 64}, DType::f16), cache};
  expect_error([&] { rope.apply(ctx(), qv, kv, pos, Tensor(), nullptr, &f16_cache); }, "k_cache");
  const ops::RopeCacheRows wide_cache{vv, slots, cache, ctx().empty({2, 16, 2, 64}, DType::bf16)};
  expect_error([&] { rope.apply(ctx(), qv, kv, pos, Tensor(), nullptr, &wide_cache); }, "v_cache");
  const ops::RopeCacheRows i32_slots{vv, ctx().empty({2}, DType::i32), cache, cache};
  expect_error([&] { rope.apply(ctx(), qv, kv, pos, Tensor(), nullptr, &i32_slots); }, "slot_mapping");
  const ops::RopeCacheRows short_v{qkv.slice(1, 5 * 64, 6 * 64).slice(0, 0, 1).unflatten(1, {1, 64}), slots, cache, cache};
  expect_error([&] { rope.apply(ctx(), qv, kv, pos, Tensor(), nullptr, &short_v); }, "rope: v");
  expect_error([&] { rope.apply(ctx(), qv, Tensor(), pos, Tensor(), nullptr, &good); }, "needs k");
}

}  // namespace
}  // namespace lw::test
