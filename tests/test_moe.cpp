// MoE routing (softmax and sigmoid scoring, bias, groups, renormalisation, ties) against a
// float64 reference, and the permutation, gather and combine around the expert GEMMs.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/elementwise.h"
#include "ops/moe.h"
#include "test_util.h"

namespace lw::test {
namespace {

struct Ref {
  std::vector<int32_t> ids;
  std::vector<double> weights;
};

Ref route_ref(const std::vector<double>& logits, int64_t tokens, int experts, const ops::MoeRouting& r,
              const std::vector<double>& bias) {
  Ref out;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> s(experts), sel(experts);
    const double* x = logits.data() + t * experts;
    if (r.sigmoid) {
      for (int e = 0; e < experts; ++e) s[e] = 1 / (1 + std::exp(-x[e]));
    } else {
      const double mx = *std::max_element(x, x + experts);
      double sum = 0;
      for (int e = 0; e < experts; ++e) sum += std::exp(x[e] - mx);
      for (int e = 0; e < experts; ++e) s[e] = std::exp(x[e] - mx) / sum;
    }
    for (int e = 0; e < experts; ++e) sel[e] = s[e] + (bias.empty() ? 0.0 : bias[e]);
    if (r.groups > 1) {
      const int per = experts / r.groups;
      std::vector<std::pair<double, int>> gs;
      for (int g = 0; g < r.groups; ++g) {
        std::vector<double> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
        std::sort(v.rbegin(), v.rend());
        gs.push_back({r.sigmoid ? v[0] + (per > 1 ? v[1] : -INFINITY) : v[0], -g});
      }
      std::sort(gs.rbegin(), gs.rend());  // best first, lower index first on ties
      std::vector<bool> keep(r.groups, false);
      for (int i = 0; i < r.topk_groups; ++i) keep[-gs[i].second] = true;
      for (int e = 0; e < experts; ++e)
        if (!keep[e / per]) sel[e] = -INFINITY;
    }
    std::vector<int> order(experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sel[a] > sel[b]; });
    double sum = 0;
    for (int j = 0; j < r.k; ++j) sum += s[order[j]];
    for (int j = 0; j < r.k; ++j) {
      out.ids.push_back(order[j]);
      out.weights.push_back((r.renormalize ? s[order[j]] / sum : s[order[j]]) * r.scale);
    }
  }
  return out;
}

void run_route(DType dt, int64_t tokens, int experts, ops::MoeRouting r, bool with_bias) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", " << tokens << " tokens, " << experts << " experts, k "
                                    << r.k << (r.sigmoid ? ", sigmoid" : ", softmax") << ", groups " << r.groups << "/"
                                    << r.topk_groups << (with_bias ? ", bias" : ""));
  Tensor lh = random_host({tokens, experts}, dt, -4, 4);
  std::vector<double> bias;
  if (with_bias) {
    Tensor bh = random_host({experts}, DType::f32, -0.5, 0.5);
    bias = to_doubles(bh);
    r.correction_bias = ctx().to_device(bh);
  }
  Tensor w = ctx().empty({tokens, r.k}, DType::f32), ids = ctx().empty({tokens, r.k}, DType::i32);
  poison(w);
  poison(ids);
  ops::moe_route(ctx(), ctx().to_device(lh), r, w, ids);
  const Ref ref = route_ref(to_doubles(lh), tokens, experts, r, bias);
  Tensor idh = ctx().to_host(ids);
  const std::vector<int32_t> got(idh.data<int32_t>(), idh.data<int32_t>() + tokens * r.k);
  EXPECT_EQ(got, ref.ids);
  EXPECT_TRUE(all_close(ctx().to_host(w), ref.weights, 1e-5, 1e-7));
}

TEST(MoeRoute, SoftmaxAndSigmoidScoring) {
  for (DType dt : {DType::f32, DType::bf16}) {
    run_route(dt, 9, 8, {.k = 2}, false);                                    // Mixtral
    run_route(dt, 5, 60, {.k = 4, .renormalize = false}, false);             // Qwen2-MoE
    run_route(dt, 3, 128, {.k = 8}, false);                                  // Qwen3-MoE
    run_route(dt, 4, 256, {.k = 16, .renormalize = false, .scale = 2.5f}, false);
  }
}

TEST(MoeRoute, DeepSeekV3GroupsAndCorrectionBias) {
  ops::MoeRouting r;
  r.k = 8;
  r.sigmoid = true;
  r.groups = 8;
  r.topk_groups = 4;
  r.scale = 2.5f;
  run_route(DType::bf16, 6, 256, r, true);
  r.sigmoid = false;  // DeepSeek-V2 style: softmax scores, group = its best expert
  r.groups = 4;
  r.topk_groups = 2;
  run_route(DType::f32, 5, 64, r, false);
}

TEST(MoeRoute, TiesGoToTheLowerExpert) {
  Tensor lh = Tensor::empty_host({1, 16}, DType::f32);
  for (int e = 0; e < 16; ++e) lh.data<float>()[e] = (e == 3 || e == 9 || e == 12) ? 2.0f : 0.0f;
  Tensor w = ctx().empty({1, 2}, DType::f32), ids = ctx().empty({1, 2}, DType::i32);
  ops::moe_route(ctx(), ctx().to_device(lh), {.k = 2}, w, ids);
  Tensor idh = ctx().to_host(ids);
  EXPECT_EQ(idh.data<int32_t>()[0], 3);
  EXPECT_EQ(idh.data<int32_t>()[1], 9);
}

// A NaN score ranks as -inf (after every number, ties to the lower index): k experts, each
// once, whatever the scores.
TEST(MoeRoute, NaNScoresRankLast) {
  Tensor lh = Tensor::empty_host({1, 4}, DType::f32);
  const float logits[] = {NAN, 1.0f, NAN, 0.5f};
  for (int e = 0; e < 4; ++e) lh.data<float>()[e] = logits[e];
  ops::MoeRouting r;
  r.k = 4;
  r.sigmoid = true;
  Tensor w = ctx().empty({1, 4}, DType::f32), ids = ctx().empty({1, 4}, DType::i32);
  ops::moe_route(ctx(), ctx().to_device(lh), r, w, ids);
  const Tensor idh = ctx().to_host(ids);
  const int32_t want[] = {1, 3, 0, 2};
  for (int j = 0; j < 4; ++j) EXPECT_EQ(idh.data<int32_t>()[j], want[j]) << "place " << j;
}

// Permutation, gather and combine of `tokens` tokens routed to k distinct experts each; the
// "experts" scale their rows by (1 + expert id); combine's sums against float64 over the
// gathered values as stored.
void run_round_trip(DType dt, int64_t tokens, int64_t hidden, int experts, int k) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", " << tokens << " tokens of " << hidden << ", top " << k << " of "
                                    << experts);
  Tensor idh = Tensor::empty_host({tokens, k}, DType::i32);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int> e(experts);
    std::iota(e.begin(), e.end(), 0);
    std::shuffle(e.begin(), e.end(), rng());
    for (int j = 0; j < k; ++j) idh.data<int32_t>()[t * k + j] = e[j];
  }
  const ops::MoePermutation perm = ops::moe_permutation(ctx(), ctx().to_device(idh), experts);
  Tensor off = ctx().to_host(perm.offsets), rows = ctx().to_host(perm.rows), inv = ctx().to_host(perm.inverse);
  // Rows grouped by expert, tokens ascending within each; inverse points back.
  for (int e = 0; e < experts; ++e) {
    int32_t prev = -1;
    for (int32_t r = off.data<int32_t>()[e]; r < off.data<int32_t>()[e + 1]; ++r) {
      EXPECT_GT(rows.data<int32_t>()[r], prev);
      prev = rows.data<int32_t>()[r];
    }
  }
  EXPECT_EQ(off.data<int32_t>()[experts], tokens * k);
  for (int64_t i = 0; i < tokens * k; ++i) {
    const int32_t r = inv.data<int32_t>()[i];
    EXPECT_EQ(rows.data<int32_t>()[r], i / k);
    EXPECT_TRUE(r >= off.data<int32_t>()[idh.data<int32_t>()[i]] && r < off.data<int32_t>()[idh.data<int32_t>()[i] + 1]);
  }
  // Gather (each row a copy of its token's), then the "experts"' scaling, in f32 on the host.
  const Tensor xh = random_host({tokens, hidden}, dt);
  Tensor gathered = ctx().empty({tokens * k, hidden}, dt);
  ops::moe_gather(ctx(), ctx().to_device(xh), perm, gathered);
  const std::vector<double> x = to_doubles(xh), g = to_doubles(ctx().to_host(gathered));
  std::vector<double> scaled(g.size());
  for (int e = 0; e < experts; ++e)
    for (int32_t r = off.data<int32_t>()[e]; r < off.data<int32_t>()[e + 1]; ++r)
      for (int64_t i = 0; i < hidden; ++i) {
        ASSERT_EQ(g[r * hidden + i], x[rows.data<int32_t>()[r] * hidden + i]);
        scaled[r * hidden + i] = g[r * hidden + i] * (1 + e);
      }
  Tensor sh = Tensor::empty_host({tokens * k, hidden}, DType::f32);
  for (size_t i = 0; i < scaled.size(); ++i) sh.data<float>()[i] = static_cast<float>(scaled[i]);
  Tensor expert_out = ctx().empty({tokens * k, hidden}, dt);
  ops::cast(ctx(), ctx().to_device(sh), expert_out);
  const std::vector<double> stored = to_doubles(ctx().to_host(expert_out));
  const Tensor wh = random_host({tokens, k}, DType::f32, 0, 1);
  Tensor out = ctx().empty({tokens, hidden}, dt);
  poison(out);
  ops::moe_combine(ctx(), expert_out, ctx().to_device(wh), perm, out);
  const std::vector<double> w = to_doubles(wh);
  std::vector<double> want;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < hidden; ++i) {
      double acc = 0;
      for (int j = 0; j < k; ++j) acc += w[t * k + j] * stored[inv.data<int32_t>()[t * k + j] * hidden + i];
      want.push_back(acc);
    }
  const double eps = dt == DType::f32 ? 1e-6 : dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
  EXPECT_TRUE(all_close(ctx().to_host(out), want, eps, 1e-6));
}

// Rows of whole vectors and not (a scalar path), several blocks along a row, k up to 16.
TEST(MoePermutation, GatherCombineRoundTrip) {
  run_round_trip(DType::f32, 11, 40, 6, 3);
  run_round_trip(DType::bf16, 5, 36, 6, 3);
  run_round_trip(DType::f16, 3, 2056, 20, 16);
  run_round_trip(DType::bf16, 1, 4104, 128, 8);
}

TEST(MoeRoute, RejectsMisuse) {
  Tensor l = ctx().empty({2, 8}, DType::f32), w = ctx().empty({2, 2}, DType::f32), ids = ctx().empty({2, 2}, DType::i32);
  EXPECT_THROW(ops::moe_route(ctx(), l, {.k = 3}, w, ids), Error);                          // shapes for k = 3
  EXPECT_THROW(ops::moe_route(ctx(), l, {.k = 2, .groups = 3, .topk_groups = 1}, w, ids), Error);  // 3 does not divide 8
  EXPECT_THROW(ops::moe_route(ctx(), l, {.k = 2, .groups = 8, .topk_groups = 1}, w, ids), Error);  // 1 expert kept < k
  EXPECT_THROW(ops::moe_route(ctx(), ctx().empty({2, 300}, DType::f32), {.k = 2}, w, ids), Error);
  EXPECT_THROW(ops::moe_permutation(ctx(), ctx().empty({2, 2}, DType::i64), 8), Error);
}

}  // namespace
}  // namespace lw::test
