// Decode attention over the paged KV cache (kernels/kv_cache.h): one query token per sequence,
// grouped-query heads, the context split into partitions processed in parallel and merged
// with the numerically stable log-sum-exp rule. The portable SIMT path.
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "kernels/kv_cache.h"

namespace lw::kernels {

struct DecodeAttentionArgs {
  int seqs;
  int q_heads;
  int kv_heads;            // divides q_heads
  int head_dim;            // <= 256
  int block_size;          // tokens per cache block
  int max_blocks_per_seq;  // columns of block_tables
  int max_context;         // >= every context length
  float scale;             // usually 1 / sqrt(head_dim)
  // Tokens per partition of the split context: 0 lets the launch pick (smaller partitions when
  // few blocks would run, which makes a row's summation order depend on the batch); a fixed
  // size makes each row's result depend on its own context only.
  int partition = 0;
  int window = 0;          // > 0: the query (at position context - 1) sees the last `window` keys only
  float softcap = 0.0f;    // > 0: scores become softcap * tanh(score / softcap)
};

// The largest partition a launch takes for these heads (the scores' shared memory bounds it).
int max_partition_size(int q_heads, int kv_heads);
// The partition size of a batch-invariant launch (DecodeAttentionArgs::partition): the smallest,
// which a lone short sequence gets anyway, so that batch 1 keeps its parallelism; large batches
// pay for it with more partial results to merge.
int batch_invariant_partition_size();

// Floats of scratch the launch needs (partial outputs, maxima and sums of the partitions).
int64_t decode_attention_workspace(const DecodeAttentionArgs& a);

// q [seqs, q_heads, head_dim] -> out [seqs, q_heads, head_dim]; block_tables int32
// [table rows, max_blocks_per_seq]; context_lens int32 [seqs] (a length of 0 gives zeros);
// table_rows int32 [seqs]: the block-table row of each query row, or null for row i -> i
// (several query rows of one sequence share its table: prefill); workspace:
// decode_attention_workspace(a) floats. C: the cache's element (kernels/kv_cache.h), with its
// scales.
template <class T, class C>
void decode_attention(const DecodeAttentionArgs& a, const T* q, const C* k_cache, const C* v_cache,
                      const KvScales& scales, const int32_t* block_tables, const int32_t* context_lens, const int32_t* table_rows,
                      float* workspace, T* out, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
