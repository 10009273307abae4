#include "model/layers.h"

#include <cmath>
#include <span>

#include "ops/attention.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/weight.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "parallel/communicator.h"

namespace lw::model {

void reduce(Context& ctx, const LayerContext& lc, const Tensor& x) {
  if (lc.shard.size > 1) lc.shard.comm->all_reduce_sum(ctx, x);
}

void pre_norm(Context& ctx, const LayerContext& lc, ResidualStream& s, const Tensor& weight) {
  const float eps = static_cast<float>(lc.config.rms_eps);
  if (s.delta_pending) ops::add_rms_norm(ctx, s.delta, s.sum, weight, eps, s.normed);
  else ops::rms_norm(ctx, s.sum, weight, eps, s.normed);
  s.delta_pending = false;
}

void transformer_block(Context& ctx, const LayerContext& lc, const LayerWeights& w, const BlockVariant& block, KvCache& cache,
                       int64_t layer, const BatchLayout& b, ResidualStream& s) {
  pre_norm(ctx, lc, s, w.attn_norm);
  attention(ctx, lc, w, block, cache, layer, s.normed, b, s.delta);
  reduce(ctx, lc, s.delta);
  s.delta_pending = true;
  pre_norm(ctx, lc, s, w.mlp_norm);
  switch (block.mlp) {
    case MlpVariant::dense: dense_mlp(ctx, lc, w.gate_up, w.down, s.normed, s.delta); break;
    case MlpVariant::moe: moe_mlp(ctx, lc, w, false, s.normed, s.delta); break;
    case MlpVariant::moe_shared_expert: moe_mlp(ctx, lc, w, true, s.normed, s.delta); break;
  }
  reduce(ctx, lc, s.delta);
  s.delta_pending = true;
}

void attention(Context& ctx, const LayerContext& lc, const LayerWeights& w, const BlockVariant& block, KvCache& cache,
               int64_t layer, const Tensor& x, const BatchLayout& b, const Tensor& out) {
  const int64_t t = x.size(0), d = lc.config.head_dim, nq = lc.local.heads, nkv = lc.local.kv_heads;
  Tensor qkv = ctx.empty({t, (nq + 2 * nkv) * d}, lc.dtype);
  ops::linear(ctx, x, w.qkv, w.qkv_bias, qkv);
  Tensor q = qkv.slice(1, 0, nq * d).unflatten(1, {nq, d});
  Tensor k = qkv.slice(1, nq * d, (nq + nkv) * d).unflatten(1, {nkv, d});
  const Tensor v = qkv.slice(1, (nq + nkv) * d, (nq + 2 * nkv) * d).unflatten(1, {nkv, d});
  // The rotated queries go to a tensor of their own: no copy out of the fused row first; the
  // heads' q_norm / k_norm (Qwen3) in the same launch. A cache in the model's dtype takes the
  // rotated K and V rows from that launch too; an 8-bit one from kv_write's (slots checked in
  // HostLayout either way).
  Tensor rotated = ctx.empty({t, nq, d}, lc.dtype);
  const ops::PagedKv& kv = cache.layer(layer);
  const ops::RopeCacheRows rows{v, b.slots, kv.k, kv.v};
  const ops::RopeCacheRows* to_cache = kv.format == ops::KvCacheFormat::model ? &rows : nullptr;
  if (block.qk_norm) {
    const ops::HeadNorm norm{w.q_norm, w.k_norm, static_cast<float>(lc.config.rms_eps)};
    lc.rope.apply(ctx, q, k, b.positions, rotated, &norm, to_cache);
  } else {
    lc.rope.apply(ctx, q, k, b.positions, rotated, nullptr, to_cache);
  }
  q = rotated;
  if (!to_cache) ops::kv_write(ctx, k, v, b.slots, kv, false);
  Tensor attn = ctx.empty({t, nq, d}, lc.dtype);
  ops::AttentionOptions options;
  options.window = static_cast<int>(lc.config.sliding_window);
  ops::prefill_attention(ctx, q, cache.layer(layer), b.block_tables, b.attention,
                         static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))), attn, options);
  ops::linear(ctx, attn.view({t, nq * d}), w.o, w.o_bias, out);
}

void dense_mlp(Context& ctx, const LayerContext& lc, const ops::Weight& gate_up, const ops::Weight& down,
               const Tensor& x, const Tensor& out) {
  const int64_t t = x.size(0), i = down.in_features();
  Tensor gu = ctx.empty({t, 2 * i}, lc.dtype);
  ops::linear(ctx, x, gate_up, Tensor(), gu);
  ops::gated_linear(ctx, ops::Activation::silu, gu, down, Tensor(), out);
}

void moe_mlp(Context& ctx, const LayerContext& lc, const LayerWeights& w, bool shared_expert, const Tensor& x,
             const Tensor& out) {
  const int64_t t = x.size(0), h = lc.config.hidden, i = lc.local.moe_intermediate, e = lc.config.experts;
  const int k = lc.config.experts_per_token;
  const DType dt = lc.dtype;
  // Every rank routes the same tokens: one fixed GEMM kernel (not a per-rank timed choice), so
  // their roundings, and so their expert choices, agree.
  const ops::GemmPath agreed = lc.shard.size > 1 ? ops::GemmPath::tiled : ops::GemmPath::automatic;
  Tensor logits = ctx.empty({t, e}, dt);
  ops::linear(ctx, x, w.router, Tensor(), logits, agreed);
  ops::MoeRouting routing;
  routing.k = k;
  routing.renormalize = lc.config.norm_topk_prob;
  Tensor weights = ctx.empty({t, k}, DType::f32), ids = ctx.empty({t, k}, DType::i32);
  ops::moe_route(ctx, logits, routing, weights, ids);
  const ops::MoePermutation perm = ops::moe_permutation(ctx, ids, static_cast<int>(e));
  Tensor xs = ctx.empty({t * k, h}, dt), gu = ctx.empty({t * k, 2 * i}, dt);
  Tensor act = ctx.empty({t * k, i}, dt), eo = ctx.empty({t * k, h}, dt);
  ops::moe_gather(ctx, x, perm, xs);
  if (w.experts_gate_up.stacked.defined()) {
    ops::grouped_linear(ctx, xs, w.experts_gate_up.stacked, perm.offsets, gu);
    ops::act_mul(ctx, ops::Activation::silu, gu, act);
    ops::grouped_linear(ctx, act, w.experts_down.stacked, perm.offsets, eo);
  } else {  // quantised experts: each expert's own Weight (the offsets read to the host at most once)
    ops::ExpertRows rows(perm.offsets);
    ops::grouped_linear(ctx, xs, w.experts_gate_up.each, rows, gu);
    ops::act_mul(ctx, ops::Activation::silu, gu, act);
    ops::grouped_linear(ctx, act, w.experts_down.each, rows, eo);
  }
  ops::moe_combine(ctx, eo, weights, perm, out);
  if (shared_expert) {
    Tensor shared = ctx.empty({t, h}, dt), gate = ctx.empty({t, 1}, dt);
    dense_mlp(ctx, lc, w.shared_gate_up, w.shared_down, x, shared);
    ops::linear(ctx, x, w.shared_gate, Tensor(), gate, agreed);
    ops::sigmoid_gated_add(ctx, out, gate, shared);
  }
}

}  // namespace lw::model
