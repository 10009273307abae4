// The paged KV cache and decode/prefill attention.
#pragma once
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "ops/select.h"

namespace lw::ops {

// Which implementation runs decode and prefill attention. portable: the SIMT kernels of
// kernels/attention_decode.cu, on every target; matrix-core paths join it here.
// LW_ATTENTION_PATH=portable forces a path where the caller passes automatic (ops/select.h).
enum class AttentionPath { automatic, portable };

// What the automatic choice of an attention call looks at.
struct AttentionShape {
  int64_t rows = 0;  // query rows: sequences (decode) or new tokens (prefill)
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int max_context = 0;
  DType dtype = DType::f32;
  bool prefill = false;
  bool deterministic = false;  // Context::deterministic
};

// The attention paths for ops/select.h.
struct AttentionPaths {
  using Path = AttentionPath;
  using Shape = AttentionShape;
  static constexpr const char* op = "attention";
  static constexpr const char* env = "LW_ATTENTION_PATH";
  static constexpr PathName<AttentionPath> names[] = {{AttentionPath::automatic, "automatic"},
                                                      {AttentionPath::portable, "portable"}};
  static Availability available(const gpu::DeviceCaps& caps, AttentionPath path);
  static AttentionPath choose(const gpu::DeviceCaps& caps, const AttentionShape& shape);
};

// Writes new K and V rows into a layer's caches. k, v: [tokens, kv_heads, head_dim] with
// contiguous heads and any token stride (views into a fused QKV output work);
// slot_mapping: i64 [tokens], slot = block * block_size + offset, -1 skips the token;
// k_cache, v_cache: [num_blocks, block_size, kv_heads, head_dim], contiguous. One float
// dtype throughout. A slot outside the cache throws lw::Error naming it (this waits for
// the stream). check false: the caller has validated the slots and nothing waits (a bad slot
// is still never written).
void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
              const Tensor& v_cache, bool check = true);

// One query token per sequence against its cached context. q: [seqs, q_heads, head_dim]
// contiguous; caches as for kv_write (kv_heads divides q_heads, at most 16 query heads per
// key/value head; head_dim <= 256 and a multiple of 16 bytes); block_tables: i32
// [seqs, max_blocks]; context_lens: i32 [seqs], each <= max_context (the caller's bound,
// which sizes the launch); out: like q. scale multiplies q.k (usually 1/sqrt(head_dim)).
void decode_attention(Context& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const Tensor& block_tables, const Tensor& context_lens, int max_context, float scale,
                      const Tensor& out, AttentionPath path = AttentionPath::automatic);

// Prefill (causal) attention for a batch of variable-length sequences whose new tokens are
// already in the caches (kv_write first): sequence i has query_lens[i] new tokens after a
// cached prefix, context_lens[i] tokens in all (prefix + new); new token j attends to the
// first context_lens[i] - query_lens[i] + j + 1 tokens. q: [sum of query_lens, q_heads,
// head_dim], the sequences' tokens one after another; out: like q; caches and block_tables as
// for decode_attention (one table row per sequence). Every query token runs the decode path
// over its own causal context: correct everywhere, and the reference a fast path is checked
// against (it reads the context once per query token).
void prefill_attention(Context& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const std::vector<int32_t>& query_lens,
                       const std::vector<int32_t>& context_lens, float scale, const Tensor& out,
                       AttentionPath path = AttentionPath::automatic);

// The per-token rows of a prefill batch, checked and uploaded once for all of a model's layers.
struct PrefillPlan {
  Tensor token_lens, token_rows;  // i32 [tokens]: causal context length and block-table row
  int64_t sequences = 0, tokens = 0;
  int max_context = 0;
};
PrefillPlan plan_prefill(Context& ctx, const std::vector<int32_t>& query_lens, const std::vector<int32_t>& context_lens);
void prefill_attention(Context& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const PrefillPlan& plan, float scale, const Tensor& out,
                       AttentionPath path = AttentionPath::automatic);

}  // namespace lw::ops
