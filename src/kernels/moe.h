// Mixture-of-experts routing: top-k expert selection per token, the token-to-expert
// permutation and its inverse, the gather into expert order, and the weighted combine.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

struct MoeRouteArgs {
  int64_t tokens;
  int experts;       // <= 256
  int k;             // <= 16, <= experts
  bool sigmoid;      // false: softmax over the experts
  bool renormalize;  // weights of the k chosen divided by their sum
  int groups;        // 1: no grouping; else experts / groups per group
  int topk_groups;   // groups kept (<= groups)
  float scale;       // multiplies the final weights (routed scaling factor)
};

// scores per token; selection on score + bias (bias may be null: DeepSeek-V3's correction
// bias); weights from the score without the bias. Ties go to the lower expert index.
// Group score: the sum of the two best biased scores of the group (sigmoid), or its best
// score (softmax).
template <class T>
void moe_route(const MoeRouteArgs& a, const T* logits, const float* bias, float* weights, int32_t* ids,
               int warp_size, cudaStream_t stream);

// From ids [tokens, k]: offsets [experts + 1] (start of each expert's rows), rows [tokens * k]
// (the source token of each row in expert order; stable: by expert, then token, then slot),
// inverse [tokens * k] (the row of each (token, slot)).
void moe_permutation(const int32_t* ids, int64_t tokens, int k, int experts, int32_t* offsets, int32_t* rows,
                     int32_t* inverse, int warp_size, cudaStream_t stream);

// out[r, :] = x[rows[r], :] for r < n.
template <class T>
void moe_gather(const T* x, const int32_t* rows, int64_t n, int64_t hidden, T* out, int warp_size, cudaStream_t stream);

// out[t, :] = sum over j < k (in order) of weights[t, j] * expert_out[inverse[t * k + j], :].
template <class T>
void moe_combine(const T* expert_out, const float* weights, const int32_t* inverse, int64_t tokens, int k,
                 int64_t hidden, T* out, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
