// The layers every architecture is built from: attention (optional q/k/v and o biases,
// optional per-head q/k RMSNorm, RoPE, paged KV cache), the dense gated SiLU MLP, the
// mixture-of-experts MLP (optional sigmoid-gated shared expert), the pre-norm residual
// stream, and the tensor-parallel sum after row-parallel projections. An architecture picks
// among them through its BlockVariant (model/arch/architecture.h).
#pragma once
#include <cstdint>

#include "core/context.h"
#include "core/tensor.h"
#include "model/arch/architecture.h"
#include "model/batch_layout.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/model_weights.h"
#include "model/shard.h"
#include "ops/rope.h"

namespace lw::model {

// What the layers of one model (or one rank's shard of it) share.
struct LayerContext {
  const ModelConfig& config;  // the whole model
  const ModelConfig& local;   // the shapes this rank holds
  DType dtype;
  const Shard& shard;
  const ops::Rope& rope;
};

// The residual stream between sublayers: the running sum, the last sublayer's output not yet
// added to it (the add is fused into the next norm), and the normalised input of the next
// sublayer.
struct ResidualStream {
  Tensor sum, delta, normed;
  bool delta_pending = false;
};

// normed = RMSNorm(sum), adding a pending delta to the sum first.
void pre_norm(Context& ctx, const LayerContext& lc, ResidualStream& s, const Tensor& weight);

// One pre-norm transformer block of variant `block`: attention then MLP, each on the normed
// stream, each followed by the sum over the ranks; their outputs are left pending in `s`.
void transformer_block(Context& ctx, const LayerContext& lc, const LayerWeights& w, const BlockVariant& block, KvCache& cache,
                       int64_t layer, const BatchLayout& b, ResidualStream& s);

// out = attention over `x` ([tokens, hidden]), writing K/V into layer `layer` of `cache`.
void attention(Context& ctx, const LayerContext& lc, const LayerWeights& w, const BlockVariant& block, KvCache& cache,
               int64_t layer, const Tensor& x, const BatchLayout& b, const Tensor& out);
// out = down(silu(gate(x)) * up(x)), gate and up fused as [2 * width, hidden].
void dense_mlp(Context& ctx, const LayerContext& lc, const ops::Weight& gate_up, const ops::Weight& down, const Tensor& x,
               const Tensor& out);
// out = the top-k experts' MLPs weighted by the router, plus the gated shared expert when
// `shared_expert`.
void moe_mlp(Context& ctx, const LayerContext& lc, const LayerWeights& w, bool shared_expert, const Tensor& x, const Tensor& out);
// The sum of every rank's partial result (row-parallel projections, the embedding shards).
void reduce(Context& ctx, const LayerContext& lc, const Tensor& x);

}  // namespace lw::model
