// Rotary position embedding, applied in place to the query and key heads of each token.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

struct RopeArgs {
  int64_t tokens;
  int q_heads;
  int k_heads;           // 0: no key tensor
  int head_dim;
  int rotary_dim;        // even, <= head_dim: the first rotary_dim dims rotate
  int64_t q_token_stride;  // elements between tokens of q (>= q_heads * head_dim)
  int64_t k_token_stride;
  int64_t q_out_token_stride;  // elements between tokens of q_out (see rope())
  bool neox;             // true: pairs (i, i + rotary_dim/2); false (GPT-J): pairs (2i, 2i+1)
  float mscale;          // multiplies cos and sin (YaRN attention factor; 1 otherwise)
  float norm_eps = 0.0f;  // the heads' RMSNorm epsilon, where rope() is given norm weights
};

// Where rope() also writes the rotated key heads and the value heads into a paged KV cache of
// T (kv_write's layout, [slots, k_heads, head_dim]), in the same launch: token t's rows go to
// slot slots[t] instead of k in place (k is left as it was); a slot of -1, or outside
// [0, num_slots), writes nothing for the token (the caller checks its slots).
template <class T>
struct RopeCacheWrite {
  const T* v = nullptr;  // [tokens, k_heads, head_dim], v_token_stride elements between tokens
  int64_t v_token_stride = 0;
  const int64_t* slots = nullptr;
  int64_t num_slots = 0;
  T* k_cache = nullptr;  // null: no cache write
  T* v_cache = nullptr;
};

// q, k: T; positions: int32 or int64 [tokens]; inv_freq: float [rotary_dim / 2], device.
// k rotates in place; q's rotated heads go to q_out (q itself, or memory apart from it, which
// then also receives the dims past rotary_dim). With q_norm (and k_norm where there is k):
// T [head_dim] weights, each head is RMS-normalised first (Qwen3's q_norm / k_norm: the
// normalised value rounded to T, times the weight, rounded again, as rms_norm gives it), every
// dim of it, so that one launch does what rms_norm per head and rope did.
template <class T, class Pos>
void rope(const RopeArgs& a, const T* q, T* q_out, T* k, const Pos* positions, const float* inv_freq, int warp_size,
          cudaStream_t stream, const T* q_norm = nullptr, const T* k_norm = nullptr,
          const RopeCacheWrite<T>& cache = {});

}  // namespace lw::kernels
