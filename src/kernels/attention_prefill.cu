#include "kernels/attention_prefill.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "gpu/async_copy.h"
#include "gpu/launch.h"
#include "gpu/matrix_fragment.h"
#include "gpu/runtime.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"
#include "kernels/attention_merge.h"
#include "kernels/attention_tile.h"
#include "kernels/kv_cache.h"

namespace lw::kernels {

namespace {

namespace mma = gpu::mma;

constexpr int kWarps = kPrefillTileRows / 16;  // one 16-row fragment of queries per warp
constexpr int kPad = 8;                        // elements added to each shared row: spreads the banks

// Keys per tile: 64, or 32 for the widest heads (their K and V tiles would not fit beside each
// other in the 64 KiB of an AMD work-group's LDS).
template <int D>
LW_HOST_DEVICE constexpr int key_tile() {
  return D > 128 ? 32 : 64;  // lint: not-a-warp (keys)
}

// Dynamic shared memory: the cache slots of two key tiles (int32), then K and V tiles, then
// (where C is no A fragment) a 16x16 staging tile per warp.
template <int D>
LW_HOST_DEVICE constexpr size_t slot_table_bytes() {
  return 2ull * key_tile<D>() * sizeof(int32_t);
}
template <class T, int D>
constexpr size_t shared_bytes() {
  constexpr int kn = key_tile<D>();
  const size_t kv = 2ull * kn * (D + kPad);
  const size_t staging = mma::kCMatchesA ? 0 : static_cast<size_t>(kWarps) * 16 * (16 + kPad);
  return slot_table_bytes<D>() + (kv + staging) * sizeof(T);
}

// Calls f(r, c) for the calling thread's pieces of a tile of kRows rows of kPerRow pieces each:
// thread tid takes pieces tid, tid + kThreads, ... (row-major). Where a row's pieces divide the
// block, a thread keeps one column and steps through rows at a fixed stride, so that the
// compiler folds each step's offsets into constants.
template <int kRows, int kPerRow, int kThreads, class F>
LW_DEVICE_INLINE void for_tile_pieces(int tid, F f) {
  if constexpr (kThreads % kPerRow == 0) {
    constexpr int kRowStep = kThreads / kPerRow;
    const int r0 = static_cast<unsigned>(tid) / kPerRow, c = static_cast<unsigned>(tid) % kPerRow;
#pragma unroll
    for (int j = 0; j < kRows; j += kRowStep) {
      if (kRows % kRowStep == 0 || r0 + j < kRows) f(r0 + j, c);
    }
  } else {
    constexpr int kPieces = kRows * kPerRow;
#pragma unroll
    for (int e0 = 0; e0 < kPieces; e0 += kThreads) {
      const int e = e0 + tid;
      if (kPieces % kThreads == 0 || e < kPieces) {
        const int r = static_cast<unsigned>(e) / kPerRow;
        f(r, e - r * kPerRow);
      }
    }
  }
}

// Grid (tile, key/value head, partition). A block's 64 rows are (new token, query head of the
// group) pairs, token-major: row r is token q0 + r / group, head kvh * group + r % group. Each
// tile of keys: K and V to shared memory (all threads), then per warp S = Q.K^T on the matrix
// cores, scale, soft-cap and mask, the online softmax update, and O += P.V. Rows past the
// tile's tokens compute on zeros and are not written. With a split (parts > 1) a block takes
// the keys of its partition only and writes its normalised part, maximum and sum.
// NVIDIA: three blocks of 128 threads per multiprocessor for head dims up to 128 (at most 170
// registers a thread), so that one block's barrier waits are covered by the others; the widest
// heads need their registers.
#if defined(LW_TARGET_CUDA)
#define LW_PREFILL_BOUNDS __launch_bounds__(kWarps * 32, D > 128 ? 1 : 3)  // lint: not-a-warp (CUDA's warp)
#else
#define LW_PREFILL_BOUNDS
#endif

template <class T, class C, int D>
__global__ void LW_PREFILL_BOUNDS prefill_kernel(PrefillAttentionArgs a, const T* q, const C* k_cache, const C* v_cache,
                                                 KvScales scales, const int32_t* block_tables, const int32_t* seq_info,
                                                 const int32_t* tile_info, float* part_out, float* part_max,
                                                 float* part_sum, T* out) {
#if LW_MATRIX_CORES
  constexpr int KN = key_tile<D>(), KS = D + kPad, PS = 16 + kPad, V = gpu::kVecWidth<T>;
  LW_DYNAMIC_SHARED(int32_t, slot_table);  // [2][KN]: tiles alternate between the halves
  LW_DYNAMIC_SHARED(T, smem_base);
  const auto smem = smem_base + slot_table_bytes<D>() / sizeof(T);
  const auto k_tile = smem;
  const auto v_tile = smem + KN * KS;
  // The last tiles of a sequence see the most keys: they start first, so that the short ones
  // fill in behind them rather than the long ones running alone at the end.
  const int tile = a.tiles - 1 - static_cast<int>(blockIdx.x);
  const int kvh = static_cast<int>(blockIdx.y), part = static_cast<int>(blockIdx.z);
  const int group = a.q_heads / a.kv_heads;
  const int s = tile_info[2 * tile], q0 = tile_info[2 * tile + 1];
  const int row0 = seq_info[3 * s], qlen = seq_info[3 * s + 1], ctx = seq_info[3 * s + 2];
  const int prefix = ctx - qlen;
  const int tokens = min(a.tile_tokens, qlen - q0);  // the tile's new tokens
  const int rows = tokens * group;                    // the block's rows in use
  constexpr int kThreads = kWarps * gpu::kWarpSize;  // the block (launch_prefill)
  const int tid = static_cast<int>(gpu::linear_thread_id());
  const int warp = gpu::warp_id();
  const int wr0 = 16 * warp;  // the warp's first row
  const int32_t* table = block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  // A cache slot's first element: one 32 x 32 -> 64-bit multiply (slots and strides are >= 0).
  const uint32_t slot_stride = static_cast<uint32_t>(a.kv_heads * D);
  auto slot_offset = [&](int slot) { return static_cast<uint64_t>(static_cast<uint32_t>(slot)) * slot_stride; };
  // Row r's query row in q and its query head.
  // Tile row r (a query token and head) is this row of q and out.
  auto row_at = [&](int r) { return static_cast<int64_t>(row0 + q0 + r / group) * a.q_heads + kvh * group + r % group; };

  mma::FragA<T> qa[D / 16];
  attention_tile::load_q(qa, wr0, rows, [&](int r) { return q + row_at(r) * D; });
  mma::FragC o[D / 16];
  float m[mma::kRowSlots], l[mma::kRowSlots];
  attention_tile::start_rows(o, m, l);

  // Keys the block needs: up to its last token's position; from its first token's window; within
  // its partition.
  int key_end = prefix + q0 + tokens;
  int key_begin = a.window > 0 ? max(0, prefix + q0 - a.window + 1) : 0;
  if (a.parts > 1) {
    key_begin = max(key_begin, part * a.partition);
    key_end = min(key_end, (part + 1) * a.partition);
  }
  // What this warp's rows can see (uniform across the warp).
  const bool warp_rows = wr0 < rows;
  const int warp_first_token = q0 + wr0 / group, warp_last_token = q0 + (min(wr0 + 15, rows - 1)) / group;
  const int warp_last_pos = prefix + warp_last_token;
  const int warp_first_key = a.window > 0 ? prefix + warp_first_token - a.window + 1 : 0;

  // The cache slots of a tile's keys, once per tile (an integer division each) for its K and V.
  auto fill_slots = [&](int kv0, int half) {
    for (int r = tid; r < KN; r += kThreads) {
      const int t = kv0 + r;
      slot_table[half * KN + r] = t < key_end ? table[t / a.block_size] * a.block_size + t % a.block_size : 0;
    }
  };
  // A tile's K (or V) rows to shared memory, in the background where the target can: K of the
  // next tile loads during this tile's P.V, V during its Q.K^T. 8-bit codes are converted to T
  // on the way (synchronously), times their scales. Keys past the end are zeros.
  auto load_tile = [&](const C* cache, const float* cache_scales, const auto& dst, int kv0, int half) {
    const C* head = cache + static_cast<int64_t>(kvh) * D;
    if constexpr (kQuantizedKv<T, C>) {
      constexpr int P = gpu::kVecWidth<C>;  // codes per 16-byte piece
      for_tile_pieces<KN, D / P, kThreads>(tid, [&](int r, int c) {
        float x[P];
        if (kv0 + r < key_end) {
          const int slot = slot_table[half * KN + r];
          kv_load<P>(head + slot_offset(slot) + c * P,
                     cache_scales[kv_scale_index(scales, slot, kvh)], x);
        } else {
#pragma unroll
          for (int j = 0; j < P; ++j) x[j] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < P; j += V) {
          gpu::Vec<T, V> y;
#pragma unroll
          for (int i = 0; i < V; ++i) y.v[i] = gpu::from_float<T>(x[j + i]);
          gpu::store_vec_at<V>(dst, r * KS + c * P + j, y);
        }
      });
    } else {
      (void)cache_scales;
      for_tile_pieces<KN, D / V, kThreads>(tid, [&](int r, int c) {
        const int slot = slot_table[half * KN + r];  // 0 (a valid address) past the end
        gpu::copy_16_async_or_zero(dst, r * KS + c * V, head + slot_offset(slot) + c * V,
                                   kv0 + r < key_end);
      });
    }
    gpu::async_commit();
  };

  const int first_tile = key_begin / KN * KN;
  if (first_tile < key_end) {
    fill_slots(first_tile, 0);
    __syncthreads();
    load_tile(k_cache, scales.k, k_tile, first_tile, 0);
  }
  for (int kv0 = first_tile; kv0 < key_end; kv0 += KN) {
    const int half = ((kv0 - first_tile) / KN) & 1;
    gpu::async_wait<0>();
    __syncthreads();  // K of this tile is in; every warp is done with the previous V
    load_tile(v_cache, scales.v, v_tile, kv0, half);
    if (kv0 + KN < key_end) fill_slots(kv0 + KN, half ^ 1);
    // Whether this warp's rows see any key of the tile, and whether they see all of them.
    const bool work = warp_rows && kv0 <= warp_last_pos && kv0 + KN - 1 >= warp_first_key;
    const bool unmasked =
        a.window <= 0 && wr0 + 15 < rows && kv0 + KN - 1 <= prefix + warp_first_token && kv0 + KN <= key_end;

    mma::FragC sc[KN / 16];
    if (work) {
#pragma unroll
      for (int nt = 0; nt < KN / 16; ++nt) {
        mma::fill(sc[nt], 0.0f);
#pragma unroll
        for (int kd = 0; kd < D / 16; ++kd) {
          mma::FragB<T> kb;
          mma::load_b_transposed_shared(kb, k_tile + nt * 16 * KS + kd * 16, KS);
          mma::mma(sc[nt], qa[kd], kb, sc[nt]);
        }
      }

      const float to_log2 = attention_tile::prepare_scores(sc, a.scale, a.softcap);
      if (!unmasked) attention_tile::mask_scores(sc, {rows, group, prefix + q0, key_begin, key_end, a.window}, wr0, kv0);
      attention_tile::online_softmax(sc, m, l, o, to_log2);
    }

    __syncthreads();  // every warp is done with K
    const bool more = kv0 + KN < key_end;
    if (more) load_tile(k_cache, scales.k, k_tile, kv0 + KN, half ^ 1);
    if (more) gpu::async_wait<1>();  // V of this tile is in; the next K may still be loading
    else gpu::async_wait<0>();
    __syncthreads();

    if (work) {
      const auto staging = smem + 2 * KN * KS + warp * 16 * PS;  // (layouts whose C is no A fragment)
#pragma unroll
      for (int kc = 0; kc < KN / 16; ++kc) attention_tile::accumulate_pv<T>(o, sc[kc], v_tile + kc * 16 * KS, KS, staging, PS);
    }
  }

  attention_tile::write_tile_rows<T>(o, m, l, wr0, rows, a.parts, part, row_at, out, part_out, part_max, part_sum);
#else
  __trap();  // no matrix cores in this device compilation: the op never selects this path here
#endif
}

// Grid (query head, tile): combines the partitions of each row of the tile's tokens (rows of
// sequences on the decode kernel are not the plan's tiles' and are left alone).
template <class T>
__global__ void prefill_merge_kernel(PrefillAttentionArgs a, const int32_t* seq_info, const int32_t* tile_info,
                                     const float* part_out, const float* part_max, const float* part_sum, T* out) {
  const int s = tile_info[2 * blockIdx.y], q0 = tile_info[2 * blockIdx.y + 1];
  const int row0 = seq_info[3 * s], tokens = min(a.tile_tokens, seq_info[3 * s + 1] - q0);
  for (int j = 0; j < tokens; ++j) {
    const int64_t at = static_cast<int64_t>(row0 + q0 + j) * a.q_heads + blockIdx.x;
    merge_partitions(part_out + at * a.parts * a.head_dim, part_max + at * a.parts, part_sum + at * a.parts, a.parts,
                     a.head_dim, out + at * a.head_dim);
  }
}

template <class T, class C, int D>
void launch_prefill(const PrefillAttentionArgs& a, const T* q, const C* k_cache, const C* v_cache,
                    const KvScales& scales, const int32_t* block_tables, const int32_t* seq_info, const int32_t* tile_info, float* workspace,
                    T* out, int warp_size, cudaStream_t stream) {
  const PrefillParts p = prefill_parts(a, workspace);
  gpu::launch("prefill_attention", prefill_kernel<T, C, D>,
              {dim3(static_cast<unsigned>(a.tiles), static_cast<unsigned>(a.kv_heads), static_cast<unsigned>(a.parts)),
               dim3(kWarps * warp_size), shared_bytes<T, D>(), stream},
              a, q, k_cache, v_cache, scales, block_tables, seq_info, tile_info, p.out, p.max, p.sum, out);
  if (a.parts > 1) prefill_merge(a, seq_info, tile_info, workspace, out, warp_size, stream);
}

}  // namespace

template <class T>
void prefill_merge(const PrefillAttentionArgs& a, const int32_t* seq_info, const int32_t* tile_info,
                   const float* workspace, T* out, int warp_size, cudaStream_t stream) {
  const PrefillParts p = prefill_parts(a, const_cast<float*>(workspace));
  gpu::launch("prefill_attention_merge", prefill_merge_kernel<T>,
              {dim3(static_cast<unsigned>(a.q_heads), static_cast<unsigned>(a.tiles)),
               dim3(gpu::round_block_size(a.head_dim, warp_size)), 0, stream},
              a, seq_info, tile_info, p.out, p.max, p.sum, out);
}
template void prefill_merge<half>(const PrefillAttentionArgs&, const int32_t*, const int32_t*, const float*, half*, int,
                                  cudaStream_t);
template void prefill_merge<bfloat16>(const PrefillAttentionArgs&, const int32_t*, const int32_t*, const float*,
                                      bfloat16*, int, cudaStream_t);

const std::vector<int>& prefill_head_dims() {
  static const std::vector<int> dims = {64, 80, 96, 128, 256};  // lint: not-a-warp
  return dims;
}
bool prefill_head_dim_supported(int head_dim) {
  const auto& d = prefill_head_dims();
  return std::find(d.begin(), d.end(), head_dim) != d.end();
}

PrefillTables prefill_tables(const std::vector<int32_t>& query_lens, const std::vector<int32_t>& context_lens,
                             int group, int decode_max_tokens) {
  LW_CHECK(group >= 1, "prefill_tables: group " << group << " must be >= 1");
  PrefillTables t;
  t.tile_tokens = prefill_tile_tokens(group);
  int32_t row = 0;
  for (size_t s = 0; s < query_lens.size(); ++s) {
    t.seq_info.insert(t.seq_info.end(), {row, query_lens[s], context_lens[s]});
    if (query_lens[s] >= 1 && query_lens[s] <= decode_max_tokens) {
      t.decode_seqs.push_back(static_cast<int32_t>(s));
      row += query_lens[s];
      continue;
    }
    for (int32_t q0 = 0; q0 < query_lens[s]; q0 += t.tile_tokens) {
      t.tile_info.insert(t.tile_info.end(), {static_cast<int32_t>(s), q0});
      ++t.tiles;
    }
    row += query_lens[s];
  }
  return t;
}

// Split while the launch would have fewer than two blocks per multiprocessor (and at least 64
// blocks in all), into partitions of at least 256 keys (a multiple of every key tile).
void choose_prefill_split(PrefillAttentionArgs& a, int max_context, int multiprocessors) {
  constexpr int kMinPartition = 256;
  constexpr int64_t kMinBlocks = 64;  // lint: not-a-warp (blocks)
  a.partition = 0;
  a.parts = 1;
  const int64_t blocks = static_cast<int64_t>(a.tiles) * a.kv_heads;
  const int64_t want = std::max<int64_t>(kMinBlocks, 2ll * multiprocessors);
  if (blocks >= want || max_context <= kMinPartition) return;
  const int64_t splits = (want + blocks - 1) / blocks;
  int64_t partition = (max_context + splits - 1) / splits;
  partition = std::max<int64_t>(kMinPartition, (partition + kMinPartition - 1) / kMinPartition * kMinPartition);
  const int parts = static_cast<int>((max_context + partition - 1) / partition);
  if (parts <= 1) return;
  a.partition = static_cast<int>(partition);
  a.parts = parts;
}

int64_t prefill_workspace(const PrefillAttentionArgs& a) {
  return a.parts > 1 ? static_cast<int64_t>(a.rows) * a.q_heads * a.parts * (a.head_dim + 2) : 0;
}

template <class T, class C>
void prefill_attention(const PrefillAttentionArgs& a, const T* q, const C* k_cache, const C* v_cache,
                       const KvScales& scales, const int32_t* block_tables, const int32_t* seq_info, const int32_t* tile_info, float* workspace,
                       T* out, int warp_size, cudaStream_t stream) {
  if (a.tiles == 0) return;
  LW_CHECK(a.kv_heads > 0 && a.q_heads % a.kv_heads == 0,
           "prefill_attention: " << a.q_heads << " query heads over " << a.kv_heads << " key/value heads");
  LW_CHECK(a.tile_tokens == prefill_tile_tokens(a.q_heads / a.kv_heads),
           "prefill_attention: the tables have tiles of " << a.tile_tokens << " tokens; " << a.q_heads / a.kv_heads
                                                          << " query heads per key/value head need "
                                                          << prefill_tile_tokens(a.q_heads / a.kv_heads));
  LW_CHECK(a.parts == 1 || (a.partition % 64 == 0 && workspace != nullptr),  // lint: not-a-warp (keys)
           "prefill_attention: a split needs partitions of a multiple of 64 keys and a workspace");
  switch (a.head_dim) {
    case 64: launch_prefill<T, C, 64>(a, q, k_cache, v_cache, scales, block_tables, seq_info, tile_info, workspace, out, warp_size, stream); break;  // lint: not-a-warp
    case 80: launch_prefill<T, C, 80>(a, q, k_cache, v_cache, scales, block_tables, seq_info, tile_info, workspace, out, warp_size, stream); break;
    case 96: launch_prefill<T, C, 96>(a, q, k_cache, v_cache, scales, block_tables, seq_info, tile_info, workspace, out, warp_size, stream); break;
    case 128: launch_prefill<T, C, 128>(a, q, k_cache, v_cache, scales, block_tables, seq_info, tile_info, workspace, out, warp_size, stream); break;
    case 256: launch_prefill<T, C, 256>(a, q, k_cache, v_cache, scales, block_tables, seq_info, tile_info, workspace, out, warp_size, stream); break;
    default: LW_FAIL("prefill_attention: head_dim " << a.head_dim << " is not one of 64, 80, 96, 128, 256");
  }
}

#define LW_PREFILL(T, C)                                                                                       \
  template void prefill_attention<T, C>(const PrefillAttentionArgs&, const T*, const C*, const C*, const KvScales&, \
                                        const int32_t*, const int32_t*, const int32_t*, float*, T*, int, cudaStream_t);
#define LW_PREFILL_ALL(T) LW_PREFILL(T, T) LW_PREFILL(T, uint8_t) LW_PREFILL(T, int8_t)
LW_PREFILL_ALL(half)
LW_PREFILL_ALL(bfloat16)
#undef LW_PREFILL_ALL
#undef LW_PREFILL

}  // namespace lw::kernels
