// Decode attention on matrix cores (gpu/matrix_fragment.h): the query rows of one sequence and
// one key/value head (its new tokens x the query heads of the group, at most 16) form one
// fragment, and one warp walks that sequence's keys in tiles of 16 through a ring of tiles in
// shared memory that the warp fills in the background (cp.async on NVIDIA) while it computes,
// so that several tiles per warp are in flight; long contexts are split over several warps of
// a block (merged in shared memory) and over several blocks (merged by the last of them to
// finish, or by a second launch). The prefill kernel (kernels/attention_prefill.h) takes the
// sequences with more rows; both read the same tables.
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "kernels/kv_cache.h"

namespace lw::kernels {

struct MatrixDecodeArgs {
  int seqs;                // entries of the decode list
  int q_heads;
  int kv_heads;            // divides q_heads
  int head_dim;            // one of prefill_head_dims()
  int block_size;          // tokens per cache block
  int max_blocks_per_seq;  // columns of block_tables
  float scale;             // multiplies q.k
  int window;              // > 0: a query at position p sees keys j with p - window < j <= p
  float softcap;           // > 0: scores become softcap * tanh(score / softcap) before the mask
  // Split of each context into partitions of `partition` keys (a multiple of 16) run by their
  // own blocks and merged: parts > 1 needs the workspace of matrix_decode_workspace. 0: none.
  int partition = 0;
  int parts = 1;
  // Warps of a block (1..kMatrixDecodeMaxWarps), each over a run of its partition's key tiles.
  int warps = 1;
  int kv_bytes = 2;  // bytes of a cache element (1: 8-bit codes), for the split's resident warps
};

// Rows of the kernel's fragment: a sequence with new tokens x group <= 16 fits.
inline constexpr int kMatrixDecodeRows = 16;
// The most new tokens a sequence may have for the decode kernel with `group` query heads per
// key/value head (0: none).
inline int matrix_decode_max_tokens(int group) { return group >= 1 && group <= kMatrixDecodeRows ? kMatrixDecodeRows / group : 0; }

inline constexpr int kMatrixDecodeMaxWarps = 8;

// Splits contexts of up to max_context keys so that the launch fills one wave of resident warps
// (8 per multiprocessor, 6 for head_dim 256: enough tiles in flight to cover the memory
// latency) without starting a second, at least 64 keys per warp: first over the warps of a
// block (as many as shared_per_block bytes hold), then into partitions. Sets warps, parts and
// partition; a batch that fills the wave alone keeps one warp per block and no split.
void choose_matrix_decode_split(MatrixDecodeArgs& a, int max_context, int multiprocessors, size_t shared_per_block);
// The counters a split launch with a merge by its last blocks takes: one per decode-list entry
// and key/value head.
inline int64_t matrix_decode_counters(const MatrixDecodeArgs& a) { return static_cast<int64_t>(a.seqs) * a.kv_heads; }
// Dynamic shared memory of one warp of the kernel (a block takes warps times it).
size_t matrix_decode_warp_bytes(int head_dim, int kv_bytes);
// Floats of workspace a split launch needs (0 without a split): the partial results of the
// decode-list entries only, whatever else the batch holds.
int64_t matrix_decode_workspace(const MatrixDecodeArgs& a);

// For each sequence s = decode_seqs[i] (seq_info as kernels::PrefillTables: first row in q, new
// tokens, context with them): its new tokens attend causally (within the window) to its keys in
// the paged cache. q, out [rows, q_heads, head_dim]; rows of other sequences are not touched.
// T: half or bfloat16; C: the cache's element (kernels/kv_cache.h), 8-bit codes loaded in the
// background as they are and converted to T per tile, times their scales.
// A split's partitions are merged by the last of their blocks to finish where `counters` is
// given (matrix_decode_counters(a) zeroed int32s, left zero again after the launch: keep them
// for later launches), else by a second launch.
template <class T, class C>
void matrix_decode_attention(const MatrixDecodeArgs& a, const T* q, const C* k_cache, const C* v_cache,
                             const KvScales& scales, const int32_t* block_tables, const int32_t* seq_info, const int32_t* decode_seqs,
                             float* workspace, int32_t* counters, T* out, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
