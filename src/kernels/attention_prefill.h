// Prefill attention on matrix cores (gpu/matrix_fragment.h), FlashAttention-2 style: a block
// takes 64 query rows of one sequence and one query head (16 rows per warp), walks the keys of
// the paged KV cache (kernels/kv_cache.h) in tiles with an online softmax in fp32, and reads
// each key and value once per tile of query rows, not once per query token.
#pragma once
#include <cstdint>
#include <vector>

#include "gpu/compat.h"
#include "kernels/kv_cache.h"

namespace lw::kernels {

struct PrefillAttentionArgs {
  int seqs;
  int q_heads;
  int kv_heads;            // divides q_heads
  int head_dim;            // one of prefill_head_dims()
  int block_size;          // tokens per cache block
  int max_blocks_per_seq;  // columns of block_tables
  int tiles;               // query tiles of the plan (prefill_tables)
  int tile_tokens;         // new tokens per tile: prefill_tile_tokens(q_heads / kv_heads)
  float scale;             // multiplies q.k
  int window;              // > 0: a query at position p sees keys j with p - window < j <= p
  float softcap;           // > 0: scores become softcap * tanh(score / softcap) before the mask
  // Split of each context into partitions of `partition` keys (a multiple of 64) run by their
  // own blocks and merged: parts > 1 needs the workspace of prefill_workspace. 0: no split.
  int partition = 0;
  int parts = 1;
  int rows = 0;            // query rows in q (the sum of new tokens), for the split's workspace
};
// The query rows a block takes: new tokens x the query heads of one key/value head (grouped
// query heads share the block's key and value tiles), 16 rows per warp.
inline constexpr int kPrefillTileRows = 64;  // lint: not-a-warp (4 fragments of 16 rows)
// New tokens per query tile for `group` query heads per key/value head.
inline int prefill_tile_tokens(int group) { return group >= kPrefillTileRows ? 1 : kPrefillTileRows / group; }
// Head dims the kernel is built for.
bool prefill_head_dim_supported(int head_dim);
const std::vector<int>& prefill_head_dims();

// The per-sequence and per-tile tables of a batch: seq_info int32 [seqs][3] = (first row of the
// sequence in q, new tokens, context length with them); tile_info int32 [tiles][2] =
// (sequence, first new token of the tile), tiles of prefill_tile_tokens(group) tokens;
// decode_seqs: the sequences with 1 to decode_max_tokens new tokens, which the decode kernel
// (kernels/attention_decode_matrix.h) takes instead (0: none, every sequence in tiles).
// Sequences without new tokens are in neither.
struct PrefillTables {
  std::vector<int32_t> seq_info, tile_info, decode_seqs;
  int tiles = 0;
  int tile_tokens = 0;
};
PrefillTables prefill_tables(const std::vector<int32_t>& query_lens, const std::vector<int32_t>& context_lens,
                             int group, int decode_max_tokens = 0);

// The split of contexts a launch of `blocks` blocks (tiles x key/value heads) over contexts of
// at most max_context keys takes to fill `multiprocessors`: PrefillAttentionArgs::partition and
// parts (0 and 1: no split).
void choose_prefill_split(PrefillAttentionArgs& a, int max_context, int multiprocessors);
// Floats of workspace a split launch needs (0 without a split).
int64_t prefill_workspace(const PrefillAttentionArgs& a);
// Where a split launch's parts go in that workspace: per (row, query head, part) the
// normalised values (head_dim floats), the reference maximum and the sum; all null without a
// split.
struct PrefillParts {
  float* out = nullptr;
  float* max = nullptr;
  float* sum = nullptr;
};
inline PrefillParts prefill_parts(const PrefillAttentionArgs& a, float* workspace) {
  if (a.parts <= 1) return {};
  const int64_t per = static_cast<int64_t>(a.rows) * a.q_heads * a.parts;
  return {workspace, workspace + per * a.head_dim, workspace + per * (a.head_dim + 1)};
}

// A split launch's second step: each tile row's partitions (in the workspace after
// prefill_attention's kernel, or another kernel of the same tables) combined into out.
template <class T>
void prefill_merge(const PrefillAttentionArgs& a, const int32_t* seq_info, const int32_t* tile_info,
                   const float* workspace, T* out, int warp_size, cudaStream_t stream);

// q [rows, q_heads, head_dim] -> out [rows, q_heads, head_dim]: new token j of sequence s (row
// seq_info[s][0] + j) attends to the keys 0 .. context - new + j of its sequence (within the
// window). One new token per sequence is decode: the query heads of a group fill the rows.
// workspace: prefill_workspace(a) floats. T: half or bfloat16; C: the cache's element
// (kernels/kv_cache.h), 8-bit codes converted to T as their tiles are loaded.
template <class T, class C>
void prefill_attention(const PrefillAttentionArgs& a, const T* q, const C* k_cache, const C* v_cache,
                       const KvScales& scales, const int32_t* block_tables, const int32_t* seq_info, const int32_t* tile_info, float* workspace,
                       T* out, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
