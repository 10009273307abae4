// The paged KV cache and decode/prefill attention.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "ops/select.h"

namespace lw::ops {

// Which implementation runs decode and prefill attention (LW_ATTENTION_PATH=portable|matrix
// forces one where the caller passes automatic; ops/select.h):
//   portable  the SIMT kernels of kernels/attention_decode.cu, every dtype, every target: one
//             query row per block row, the context split into partitions (the oracle);
//   matrix    prefill_attention on matrix cores (kernels/attention_prefill.cu; one new token
//             per sequence is decode): f16/bf16, head dims 64, 80, 96, 128, 256; NVIDIA sm_80+,
//             AMD MFMA (gfx90a, gfx942) and WMMA (gfx11), and the emulator. decode_attention
//             (no plan) stays portable: forcing matrix on it is refused;
//   hopper    the matrix path with its query tiles on NVIDIA Hopper's warpgroup multiply
//             (kernels/attention_prefill_hopper.cu, sm_90 in a build whose CUDA architectures
//             include 90): f16/bf16, head dims 64 and 128, keys and values in the model's
//             dtype; its single-token sequences take the matrix decode kernel as there.
enum class AttentionPath { automatic, portable, matrix, hopper };

// What shapes the scores beyond softmax(scale * q.k); the defaults change nothing.
struct AttentionOptions {
  int window = 0;        // > 0: a query at position p sees keys j with p - window < j <= p (sliding window)
  float softcap = 0.0f;  // > 0: scores become softcap * tanh(score / softcap), before the mask
};

// What the automatic choice of an attention call looks at.
struct AttentionShape {
  int64_t rows = 0;  // query rows: sequences (decode) or new tokens (prefill)
  int64_t sequences = 0;
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int max_context = 0;
  DType dtype = DType::f32;
  bool prefill = false;
  bool deterministic = false;  // Context::deterministic
  bool quantized_kv = false;   // the cache holds 8-bit codes (KvCacheFormat other than model)
};

// The attention paths for ops/select.h.
struct AttentionPaths {
  using Path = AttentionPath;
  using Shape = AttentionShape;
  static constexpr const char* op = "attention";
  static constexpr const char* env = "LW_ATTENTION_PATH";
  static constexpr PathName<AttentionPath> names[] = {
      {AttentionPath::automatic, "automatic"}, {AttentionPath::portable, "portable"}, {AttentionPath::matrix, "matrix"},
      {AttentionPath::hopper, "hopper"}};
  static Availability available(const gpu::DeviceCaps& caps, AttentionPath path);
  static AttentionPath choose(const gpu::DeviceCaps& caps, const AttentionShape& shape);
};
// Whether the matrix path takes this shape (dtype, head dim, prefill); when not, why.
Availability matrix_attention_supports(const AttentionShape& shape);
// Whether the hopper path takes it (the matrix path's rule, head dims 64 and 128, the cache in
// the model's dtype); when not, why.
Availability hopper_attention_supports(const AttentionShape& shape);

// How a KV cache stores keys and values (--kv-cache-dtype): in the model's dtype, or as 8-bit
// codes with f32 scales (kernels/kv_cache.h), half the bytes of bf16:
//   fp8_e4m3  e4m3fn codes, value = code x the scale of its key/value head (fixed when the cache
//             is made: 1 unless the checkpoint gives one); magnitudes beyond 448 x the scale
//             saturate;
//   int8      symmetric int8 codes, value = code x the scale of its (slot, head): that head's
//             largest magnitude / 127 when the token was written.
enum class KvCacheFormat { model, fp8_e4m3, int8 };
const char* kv_cache_format_name(KvCacheFormat format);
// "auto" (the model's dtype), "fp8" / "fp8_e4m3", "int8"; anything else is refused by name.
KvCacheFormat parse_kv_cache_format(const std::string& name);
// The format of its enumerator's value (as a runner command carries it); others are refused.
KvCacheFormat kv_cache_format_from_code(int code);
// Bytes a cache element takes for a model of dtype `model` (scales not counted).
size_t kv_cache_element_bytes(KvCacheFormat format, DType model);

// One layer's paged caches: k, v [num_blocks, block_size, kv_heads, head_dim], contiguous, in
// the model's dtype (format model) or i8 holding the codes; k_scale, v_scale f32: [kv_heads]
// for fp8_e4m3, [num_blocks, block_size, kv_heads] for int8, undefined for model.
struct PagedKv {
  Tensor k, v;
  KvCacheFormat format = KvCacheFormat::model;
  Tensor k_scale, v_scale;
};

// Writes new K and V rows into a layer's caches. k, v: [tokens, kv_heads, head_dim] with
// contiguous heads and any token stride (views into a fused QKV output work);
// slot_mapping: i64 [tokens], slot = block * block_size + offset, -1 skips the token;
// k_cache, v_cache: [num_blocks, block_size, kv_heads, head_dim], contiguous. One float
// dtype throughout. A slot outside the cache throws lw::Error naming it (this waits for
// the stream). check false: the caller has validated the slots and nothing waits (a bad slot
// is still never written).
// 8-bit caches get the rows' codes (and, int8, their scales).
void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const PagedKv& cache,
              bool check = true);
void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
              const Tensor& v_cache, bool check = true);

// One query token per sequence against its cached context. q: [seqs, q_heads, head_dim]
// contiguous; caches as for kv_write (kv_heads divides q_heads, at most 16 query heads per
// key/value head; head_dim <= 256 and a multiple of 16 bytes); block_tables: i32
// [seqs, max_blocks]; context_lens: i32 [seqs], each <= max_context (the caller's bound,
// which sizes the launch); out: like q. scale multiplies q.k (usually 1/sqrt(head_dim)).
// Every path reads every cache format.
void decode_attention(Context& ctx, const Tensor& q, const PagedKv& cache, const Tensor& block_tables,
                      const Tensor& context_lens, int max_context, float scale, const Tensor& out,
                      const AttentionOptions& options = {}, AttentionPath path = AttentionPath::automatic);
void decode_attention(Context& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const Tensor& block_tables, const Tensor& context_lens, int max_context, float scale,
                      const Tensor& out, const AttentionOptions& options = {},
                      AttentionPath path = AttentionPath::automatic);

// Prefill (causal) attention for a batch of variable-length sequences whose new tokens are
// already in the caches (kv_write first): sequence i has query_lens[i] new tokens after a
// cached prefix, context_lens[i] tokens in all (prefix + new); new token j attends to the
// first context_lens[i] - query_lens[i] + j + 1 tokens. q: [sum of query_lens, q_heads,
// head_dim], the sequences' tokens one after another; out: like q; caches and block_tables as
// for decode_attention (one table row per sequence). The portable path runs every query token
// through the decode kernel over its own causal context (it reads the context once per query
// token); the matrix path reads it once per 64 query rows (new tokens x the query heads of a
// group), splitting long contexts over several blocks when the batch alone would not fill the
// device. On the matrix path a sequence whose new tokens x group fit one 16-row fragment (a
// decode step) runs on the decode kernel instead, one warp per (sequence, key/value head,
// partition) with several key tiles in flight (not in deterministic mode, whose plans put every
// sequence in query tiles: a row's keys then always meet in one block, in one order). The
// automatic choice takes the matrix path wherever it supports the shape.
void prefill_attention(Context& ctx, const Tensor& q, const PagedKv& cache, const Tensor& block_tables,
                       const std::vector<int32_t>& query_lens, const std::vector<int32_t>& context_lens, float scale,
                       const Tensor& out, const AttentionOptions& options = {},
                       AttentionPath path = AttentionPath::automatic);
void prefill_attention(Context& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const std::vector<int32_t>& query_lens,
                       const std::vector<int32_t>& context_lens, float scale, const Tensor& out,
                       const AttentionOptions& options = {}, AttentionPath path = AttentionPath::automatic);

// A prefill batch checked and uploaded once for all of a model's layers: per-token rows for
// the portable path, per-sequence and per-tile tables and the decode list for the matrix path
// (made for the context's mode: deterministic plans have no decode list).
struct PrefillPlan {
  Tensor token_lens, token_rows;  // i32 [tokens]: causal context length and block-table row
  Tensor seq_info, tile_info;     // i32 [3 * sequences], [2 * tiles]: kernels/attention_prefill.h
  Tensor decode_seqs;             // i32 [decode_count]: the sequences the matrix decode kernel takes
  int64_t sequences = 0, tokens = 0;
  int tiles = 0;
  int decode_count = 0;
  int decode_max_context = 0;  // the longest context on the decode list (sizes its split)
  int group = 1;        // query heads per key/value head the tiles are made for
  int tile_tokens = 0;  // new tokens per tile (kernels::prefill_tile_tokens(group))
  int max_context = 0;
};
PrefillPlan plan_prefill(Context& ctx, const std::vector<int32_t>& query_lens, const std::vector<int32_t>& context_lens,
                         int group = 1);
// New tokens per tile of the matrix path's tables for `group` query heads per key/value head
// (for a caller that fills a plan's tables itself, as decode graphs do).
int matrix_tile_tokens(int group);
// The most new tokens a sequence of a plan made in this context's mode may have for the matrix
// decode kernel (0: none, as in deterministic mode).
int matrix_decode_max_tokens(const Context& ctx, int group);
void prefill_attention(Context& ctx, const Tensor& q, const PagedKv& cache, const Tensor& block_tables,
                       const PrefillPlan& plan, float scale, const Tensor& out, const AttentionOptions& options = {},
                       AttentionPath path = AttentionPath::automatic);
void prefill_attention(Context& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const PrefillPlan& plan, float scale, const Tensor& out,
                       const AttentionOptions& options = {}, AttentionPath path = AttentionPath::automatic);

}  // namespace lw::ops
