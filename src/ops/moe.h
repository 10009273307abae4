// Mixture-of-experts routing and the token permutation around the expert GEMMs.
#pragma once
#include "core/context.h"
#include "core/tensor.h"

namespace lw::ops {

struct MoeRouting {
  int k = 2;                 // experts per token, <= 16
  bool sigmoid = false;      // false: softmax over the experts (Mixtral, Qwen-MoE); true: DeepSeek-V3
  bool renormalize = true;   // the k weights divided by their sum
  Tensor correction_bias;    // optional f32 [experts]: added for the choice, not to the weights
  int groups = 1;            // grouped top-k: experts split into `groups`, the best `topk_groups` kept
  int topk_groups = 1;
  float scale = 1.0f;        // routed scaling factor
};

// logits [tokens, experts] (<= 256 experts) -> weights f32 [tokens, k], ids i32 [tokens, k].
// Ties go to the lower expert index (a NaN score ranks after every number), so every target
// chooses the same k distinct experts.
void moe_route(Context& ctx, const Tensor& logits, const MoeRouting& routing, const Tensor& weights, const Tensor& ids);

struct MoePermutation {
  Tensor offsets;  // i32 [experts + 1]: expert e owns rows [offsets[e], offsets[e + 1])
  Tensor rows;     // i32 [tokens * k]: the source token of each row, grouped by expert
  Tensor inverse;  // i32 [tokens, k]: the row of each (token, slot)
};
// The stable token-to-expert order of ids (i32 [tokens, k], values < experts).
MoePermutation moe_permutation(Context& ctx, const Tensor& ids, int experts);

// out [tokens * k, hidden] = x [tokens, hidden] in expert order.
void moe_gather(Context& ctx, const Tensor& x, const MoePermutation& perm, const Tensor& out);
// out [tokens, hidden] = sum over slots of weight * expert_out [tokens * k, hidden] row.
void moe_combine(Context& ctx, const Tensor& expert_out, const Tensor& weights, const MoePermutation& perm,
                 const Tensor& out);

}  // namespace lw::ops
