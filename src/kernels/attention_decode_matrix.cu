#include "kernels/attention_decode_matrix.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "gpu/async_copy.h"
#include "gpu/last_block.h"
#include "gpu/launch.h"
#include "gpu/matrix_fragment.h"
#include "gpu/numeric.h"
#include "gpu/runtime.h"
#include "gpu/vector.h"
#include "gpu/warp.h"
#include "kernels/attention_merge.h"
#include "kernels/attention_tile.h"
#include "kernels/kv_cache.h"

namespace lw::kernels {

namespace {

namespace mma = gpu::mma;

constexpr int kKeys = 16;  // keys per tile: the columns of one score fragment
constexpr int kPad = 8;    // elements added to each shared row: spreads the banks

// The split's partial results, per decode-list entry: its new tokens x query heads (at most
// kMatrixDecodeRows x kv_heads rows, whatever the rest of the batch holds), each `parts` times.
LW_HOST_DEVICE inline int64_t part_rows(const MatrixDecodeArgs& a) {
  return static_cast<int64_t>(kMatrixDecodeRows) * a.kv_heads;
}
// The first partial row of entry i.
LW_HOST_DEVICE inline int64_t part_row(const MatrixDecodeArgs& a, int64_t i) { return i * part_rows(a); }

// Tiles in the warp's ring: one being computed, the others loading. The widest heads keep two
// (their tiles are twice the size).
template <int D>
LW_HOST_DEVICE constexpr int ring_tiles() {
  return D > 128 ? 2 : 3;
}
// Dynamic shared memory, in this order: (8-bit caches) the tile of K and V converted to the
// compute type U; (where C is no A fragment) a 16x16 staging tile of U for P; (8-bit caches) the
// ring's scales, 2 x kKeys floats per entry; the ring of K and V tiles of C, rows padded by 16
// bytes. 8-bit caches compute in f16 whatever T is: their codes convert to f16 at two per
// instruction (bf16 would take four), and every code is an f16 value.
template <class T, class C, int D>
struct DecodeShared {
  static constexpr bool kQuantized = kQuantizedKv<T, C>;
  using U = std::conditional_t<kQuantized, half, T>;
  static constexpr int KS = D + kPad;                         // row stride of U tiles
  static constexpr int CS = D + gpu::kVectorBytes / sizeof(C);  // row stride of the ring's tiles
  static constexpr int R = ring_tiles<D>();
  static constexpr size_t converted = kQuantized ? 2 * kKeys * KS : 0;  // U elements
  static constexpr size_t staging = mma::kCMatchesA ? 0 : 16 * (16 + kPad);
  static constexpr size_t scales = kQuantized ? R * 2 * kKeys : 0;    // floats
  static constexpr size_t entry = 2 * kKeys * CS;                     // C elements of a ring entry
  static constexpr size_t scales_at = (converted + staging) * sizeof(U);  // bytes
  static constexpr size_t ring_at = scales_at + scales * sizeof(float);
  static constexpr size_t bytes = ring_at + R * entry * sizeof(C);
};
// A warp's share of the block's dynamic shared memory: its ring and tiles, which the merge of
// the block's warps overlays at the end. Rounded to 16 bytes, so every warp's ring is aligned.
template <class T, class C, int D>
LW_HOST_DEVICE constexpr size_t warp_shared_bytes() {
  return (DecodeShared<T, C, D>::bytes + 15) / 16 * 16;
}

// Grid (decode-list entry, key/value head, partition), a.warps warps per block, each over its
// share of the partition's key tiles (consecutive runs), merged in shared memory at the end.
// Row r of the fragment is new token r / group, query head kvh * group + r % group; rows past
// the sequence's are zeros and not written. Each warp keeps ring_tiles - 1 tiles of K and V
// loading ahead of the one it computes: S = Q.K^T, scale, soft-cap and mask, the online softmax
// update (log2 units), O += P.V. With a split it writes its normalised part, maximum and sum.
// NVIDIA: eight warps per multiprocessor at most 255 registers each.
#if defined(LW_TARGET_CUDA)
#define LW_MATRIX_DECODE_BOUNDS __launch_bounds__(kMatrixDecodeMaxWarps * 32, 1)  // lint: not-a-warp (CUDA's warp)
#else
#define LW_MATRIX_DECODE_BOUNDS
#endif

template <class T, class C, int D>
__global__ void LW_MATRIX_DECODE_BOUNDS matrix_decode_kernel(MatrixDecodeArgs a, const T* q, const C* k_cache,
                                                             const C* v_cache, KvScales scales,
                                                             const int32_t* block_tables,
                                                             const int32_t* seq_info, const int32_t* decode_seqs,
                                                             float* part_out, float* part_max, float* part_sum,
                                                             int32_t* counters, T* out) {
  gpu::begin_after_prior_grid();
#if LW_MATRIX_CORES
  using Shared = DecodeShared<T, C, D>;
  using U = typename Shared::U;  // the fragments' type
  constexpr int KS = Shared::KS, CS = Shared::CS, PS = 16 + kPad, R = Shared::R;
  constexpr int VC = gpu::kVecWidth<C>;             // elements of C in a 16-byte piece
  constexpr int kRowPieces = D / VC;               // 16-byte pieces of a key row
  constexpr int kTilePieces = kKeys * kRowPieces;  // of a K (or V) tile
  constexpr int kPasses = (kTilePieces + gpu::kWarpSize - 1) / gpu::kWarpSize;
  constexpr int kTile = static_cast<int>(Shared::entry);  // elements of one ring entry: K, then V
  constexpr size_t kWarpBytes = warp_shared_bytes<T, C, D>();
  static_assert(attention_tile::merge_floats<D / 16>() * sizeof(float) <= kWarpBytes,
                "the merge of the block's warps overlays their shared memory");
  LW_DYNAMIC_SHARED(U, block_u);
  LW_DYNAMIC_SHARED(float, block_f);
  LW_DYNAMIC_SHARED(C, block_c);
  const int warp = gpu::warp_id();
  // This warp's share of the shared memory.
  const auto smem_u = block_u + warp * (kWarpBytes / sizeof(U));
  const auto smem_f = block_f + warp * (kWarpBytes / sizeof(float));
  const auto ring = block_c + (warp * kWarpBytes + Shared::ring_at) / sizeof(C);
  const auto ring_scales = smem_f + Shared::scales_at / sizeof(float);
  const auto staging = smem_u + Shared::converted;
  const int s = decode_seqs[blockIdx.x];
  const int kvh = static_cast<int>(blockIdx.y), part = static_cast<int>(blockIdx.z);
  const int group = a.q_heads / a.kv_heads;
  const int row0 = seq_info[3 * s], qlen = seq_info[3 * s + 1], ctx = seq_info[3 * s + 2];
  const int prefix = ctx - qlen, rows = qlen * group;
  const int lane = gpu::lane_id();
  const int32_t* table = block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const int slot_stride = a.kv_heads * D;  // a cache slot's elements (32 bits: one multiply per row)
  auto q_row = [&](int r) { return static_cast<int64_t>(row0 + r / group); };
  auto q_head = [&](int r) { return kvh * group + r % group; };

  // bf16 queries computing in f16 are scaled by 2^-8 (undone with the keys' scales), so that
  // f16's range holds any bf16 query below 2^24.
  // 8-bit caches: per-slot scales (int8) or one per head (e4m3), whose V scale multiplies the
  // output.
  const bool per_slot_scales = Shared::kQuantized && scales.slot_stride != 0;
  const float out_factor = Shared::kQuantized && !per_slot_scales ? scales.v[kvh] : 1.0f;
  constexpr float kQueryFactor = std::is_same_v<T, U> || std::is_same_v<T, half> ? 1.0f : 0x1p-8f;

  // The keys any row of the block sees (from the first token's window), within the partition.
  int key_end = ctx;
  int key_begin = a.window > 0 ? max(0, prefix - a.window + 1) : 0;
  if (a.parts > 1) {
    key_begin = max(key_begin, part * a.partition);
    key_end = min(key_end, (part + 1) * a.partition);
  }
  const int first = key_begin / kKeys * kKeys;
  const int all_tiles = key_end > first ? (key_end - first + kKeys - 1) / kKeys : 0;
  // This warp's run of the partition's tiles: [tile_begin, tiles).
  const int per_warp = (all_tiles + a.warps - 1) / a.warps;
  const int tile_begin = min(all_tiles, warp * per_warp);
  const int tiles = min(all_tiles, tile_begin + per_warp);

  // The block table in windows one warp wide: lane i holds entry window_block + i, and a tile's
  // slots come from a shuffle, so that the table is read once per kWarpSize cache blocks
  // instead of once per tile before the tile's copies (which wait for it). A tile's 16 keys
  // span at most 16 blocks, so one window always holds them. Tiles come in increasing order.
  int window_block = -gpu::kWarpSize, window_entry = -1;
  const int seq_blocks = (key_end + a.block_size - 1) / a.block_size;
  // Tile t's K and V into ring entry t % R (8-bit caches: with the keys' scales), in the
  // background where the target can; always one commit, so that the wait below counts tiles.
  // Keys past the end are zeros.
  auto load_tile = [&](int t) {
    if (t < tiles) {
      const int kv0 = first + t * kKeys;
      const int last_block = (min(kv0 + kKeys, key_end) - 1) / a.block_size;
      if (last_block >= window_block + gpu::kWarpSize) {
        window_block = kv0 / a.block_size;
        const int b = window_block + lane;
        window_entry = b < seq_blocks ? table[b] : -1;
      }
      const int key = kv0 + lane % kKeys;
      const int in_window = key < key_end ? key / a.block_size - window_block : 0;
      const int entry = gpu::shfl_idx(window_entry, in_window);
      const int my_slot = key < key_end ? entry * a.block_size + key % a.block_size : -1;
      const auto k_dst = ring + (t % R) * kTile;
      const auto v_dst = k_dst + kKeys * CS;
#pragma unroll
      for (int j = 0; j < kPasses; ++j) {
        const int e = lane + j * gpu::kWarpSize;
        const int r = e / kRowPieces, c = e - r * kRowPieces;
        const int slot = gpu::shfl_idx(my_slot, min(r, kKeys - 1));
        if (e < kTilePieces) {
          // Keys past the end (slot -1) read slot 0's address and store zeros.
          const int64_t src = static_cast<int64_t>(max(slot, 0)) * slot_stride + kvh * D + c * VC;
          gpu::copy_16_async_or_zero(k_dst, r * CS + c * VC, k_cache + src, slot >= 0);
          gpu::copy_16_async_or_zero(v_dst, r * CS + c * VC, v_cache + src, slot >= 0);
        }
      }
      if constexpr (Shared::kQuantized) {
        // Lanes 0-15: the K scales of the tile's keys; 16-31: the V scales.
        if (lane < 2 * kKeys) {
          const int at = (t % R) * 2 * kKeys + lane;
          if (my_slot >= 0) {
            const float* src = lane < kKeys ? scales.k : scales.v;
            gpu::copy_4_async(ring_scales, at, src + kv_scale_index(scales, my_slot, kvh));
          } else {
            ring_scales[at] = 0.0f;
          }
        }
      }
    }
    gpu::async_commit();
  };

#pragma unroll
  for (int t = 0; t < R - 1; ++t) load_tile(tile_begin + t);
  // Q after the ring's first tiles are on their way: its loads' latency overlaps theirs.
  mma::FragA<U> qa[D / 16];
  attention_tile::load_q(qa, 0, rows, [&](int r) { return q + (q_row(r) * a.q_heads + q_head(r)) * D; }, kQueryFactor);
  mma::FragC o[D / 16];
  float m[mma::kRowSlots], l[mma::kRowSlots];
  attention_tile::start_rows(o, m, l);
  for (int t = tile_begin; t < tiles; ++t) {
    load_tile(t + R - 1);
    gpu::async_wait<R - 1>();  // tile t is in (this lane's pieces) ...
    gpu::sync_warp();          // ... and every lane's
    const auto k_tile = [&] {
      if constexpr (Shared::kQuantized) {
        // The entry's codes to the U tile the fragments are loaded from (exact but for per-slot
        // V scales; K's scales are applied to the scores below, a per-head V scale to the output).
        const auto codes = ring + (t % R) * kTile;
        const auto tile_scales = ring_scales + (t % R) * 2 * kKeys;
        for (int e = lane; e < 2 * kTilePieces; e += gpu::kWarpSize) {
          const int half = e / kTilePieces, rest = e - half * kTilePieces;
          const int r = rest / kRowPieces, c = rest - r * kRowPieces;
          const gpu::Vec<uint32_t, 4> words = kv_words_at<C>(codes, half * kKeys * CS + r * CS + c * VC);
          // Per-slot V scales go into the V rows (in fp32, one rounding to f16): folded into the
          // probabilities instead, small scales would push them below f16's range.
          const bool scale_row = half == 1 && per_slot_scales;
          const float row_scale = scale_row ? tile_scales[kKeys + r] : 1.0f;
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            gpu::Vec<U, 4> x = kv_codes_as<U, C>(words.v[w]);
            if (scale_row) {
#pragma unroll
              for (int i = 0; i < 4; ++i) x.v[i] = gpu::from_float<U>(gpu::to_float(x.v[i]) * row_scale);
            }
            gpu::store_vec_at<4>(smem_u, half * kKeys * KS + r * KS + c * VC + 4 * w, x);
          }
        }
        gpu::sync_warp();
        return smem_u + 0;
      } else {
        return ring + (t % R) * kTile;
      }
    }();
    const auto v_tile = k_tile + kKeys * KS;
    const int kv0 = first + t * kKeys;

    // S = Q.K^T over the head dims in two chains (even and odd 16-dim steps) summed at the end:
    // a tile has one score fragment, whose accumulation is otherwise one chain of D / 16
    // dependent multiplications on the warp's critical path.
    mma::FragC sc[1], sc_odd;
    mma::fill(sc[0], 0.0f);
    mma::fill(sc_odd, 0.0f);
#pragma unroll
    for (int kd = 0; kd < D / 16; ++kd) {
      mma::FragB<U> kb;
      mma::load_b_transposed_shared(kb, k_tile + kd * 16, KS);
      if (kd % 2 == 0) mma::mma(sc[0], qa[kd], kb, sc[0]);
      else mma::mma(sc_odd, qa[kd], kb, sc_odd);
    }
#pragma unroll
    for (int i = 0; i < mma::kC; ++i) sc[0].x[i] += sc_odd.x[i];
    if constexpr (Shared::kQuantized) {  // each key's K scale (the entry's scales: K's, then V's)
      const auto tile_scales = ring_scales + (t % R) * 2 * kKeys;
#pragma unroll
      for (int i = 0; i < mma::kC; ++i) sc[0].x[i] *= tile_scales[mma::c_col(lane, i)] * (1.0f / kQueryFactor);
    }
    const float to_log2 = attention_tile::prepare_scores(sc, a.scale, a.softcap);
    // Every row sees every key of the tile unless it crosses the range's ends, a window or the
    // causal edge of the new tokens.
    const bool unmasked = a.window <= 0 && kv0 >= key_begin && kv0 + kKeys <= key_end && kv0 + kKeys - 1 <= prefix;
    if (!unmasked) {
#pragma unroll
      for (int i = 0; i < mma::kC; ++i) {
        const int key = kv0 + mma::c_col(lane, i);
        const int pos = prefix + mma::c_row(lane, i) / group;
        const bool visible =
            key >= key_begin && key < key_end && key <= pos && (a.window <= 0 || pos - key < a.window);
        if (!visible) sc[0].x[i] = -INFINITY;
      }
    }
    attention_tile::online_softmax(sc, m, l, o, to_log2);
    attention_tile::accumulate_pv<U>(o, sc[0], v_tile, KS, staging, PS);
    gpu::sync_warp();  // every lane is done with the entry before a later load refills it
  }

  attention_tile::merge_warps(o, m, l, a.warps, [&](int w) { return block_f + w * (kWarpBytes / sizeof(float)); });
  if (warp == 0) {
    attention_tile::write_rows<T>(
        o, m, l, a.parts, [&](int r) { return r < rows; }, [&](int r) { return q_row(r) * a.q_heads + q_head(r); },
        [&](int r) { return (part_row(a, blockIdx.x) + (r / group) * a.q_heads + q_head(r)) * a.parts + part; }, out,
        part_out, part_max, part_sum, out_factor);
  }
  if (a.parts == 1 || counters == nullptr) return;
  // The last of the (entry, head)'s blocks to finish merges the partitions.
  if (!gpu::last_to_arrive(counters + static_cast<int64_t>(blockIdx.x) * a.kv_heads + kvh, a.parts)) return;
  for (int r = warp; r < rows; r += a.warps) {
    const int64_t at = part_row(a, blockIdx.x) + static_cast<int64_t>(r / group) * a.q_heads + q_head(r);
    merge_partitions(part_out + at * a.parts * D, part_max + at * a.parts, part_sum + at * a.parts, a.parts, D,
                     out + (q_row(r) * a.q_heads + q_head(r)) * D, lane, gpu::kWarpSize);
  }
#else
  __trap();  // no matrix cores in this device compilation: the op never selects this path here
#endif
}

// Grid (query head, decode-list entry): combines the partitions of the sequence's rows.
template <class T>
__global__ void matrix_decode_merge_kernel(MatrixDecodeArgs a, const int32_t* seq_info, const int32_t* decode_seqs,
                                           const float* part_out, const float* part_max, const float* part_sum,
                                           T* out) {
  gpu::begin_after_prior_grid();
  const int s = decode_seqs[blockIdx.y];
  const int row0 = seq_info[3 * s], qlen = seq_info[3 * s + 1];
  for (int j = 0; j < qlen; ++j) {
    const int64_t at = part_row(a, blockIdx.y) + static_cast<int64_t>(j) * a.q_heads + blockIdx.x;
    const int64_t o = (static_cast<int64_t>(row0 + j) * a.q_heads + blockIdx.x) * a.head_dim;
    merge_partitions(part_out + at * a.parts * a.head_dim, part_max + at * a.parts, part_sum + at * a.parts, a.parts,
                     a.head_dim, out + o);
  }
}

template <class T, class C, int D>
void launch_decode(const MatrixDecodeArgs& a, const T* q, const C* k_cache, const C* v_cache, const KvScales& scales,
                   const int32_t* block_tables, const int32_t* seq_info, const int32_t* decode_seqs, float* workspace,
                   int32_t* counters, T* out, int warp_size, cudaStream_t stream) {
  const int64_t per = static_cast<int64_t>(a.seqs) * part_rows(a) * a.parts;
  float* part_out = a.parts > 1 ? workspace : nullptr;
  float* part_max = a.parts > 1 ? workspace + per * a.head_dim : nullptr;
  float* part_sum = a.parts > 1 ? part_max + per : nullptr;
  const auto kernel = matrix_decode_kernel<T, C, D>;
  const size_t shared = a.warps * warp_shared_bytes<T, C, D>();
  gpu::allow_dynamic_shared(kernel, shared);
  gpu::launch("matrix_decode_attention", kernel,
              {dim3(static_cast<unsigned>(a.seqs), static_cast<unsigned>(a.kv_heads), static_cast<unsigned>(a.parts)),
               dim3(a.warps * warp_size), shared, stream, gpu::kOverlapsPrior},
              a, q, k_cache, v_cache, scales, block_tables, seq_info, decode_seqs, part_out, part_max, part_sum, counters,
              out);
  if (a.parts > 1 && counters == nullptr) {
    gpu::launch("matrix_decode_attention_merge", matrix_decode_merge_kernel<T>,
                {dim3(static_cast<unsigned>(a.q_heads), static_cast<unsigned>(a.seqs)),
                 dim3(gpu::round_block_size(a.head_dim, warp_size)), 0, stream, gpu::kOverlapsPrior},
                a, seq_info, decode_seqs, part_out, part_max, part_sum, out);
  }
}

}  // namespace

// A warp's shared memory for this head dim and cache element size (the compute type's size
// does not change it: half stands for both).
size_t matrix_decode_warp_bytes(int head_dim, int kv_bytes) {
  auto of = [&]<class C>() {
    switch (head_dim) {
      case 64: return warp_shared_bytes<half, C, 64>();  // lint: not-a-warp
      case 80: return warp_shared_bytes<half, C, 80>();
      case 96: return warp_shared_bytes<half, C, 96>();
      case 128: return warp_shared_bytes<half, C, 128>();
      default: return warp_shared_bytes<half, C, 256>();
    }
  };
  return kv_bytes == 1 ? of.template operator()<uint8_t>() : of.template operator()<half>();
}

// Resident warps per multiprocessor in blocks of `warps`: as many blocks as fit in an
// H100/H200's 227 KiB of shared memory (1 KiB of each block's is the runtime's), at most eight
// warps (the launch bounds). 16-bit caches: 8 for head dims up to 128 in blocks of 1, 2, 4 or
// 8 warps; 6 for 256 in blocks of 1 or 2.
int resident_warps(size_t warp_bytes, int warps) {
  constexpr size_t kSharedPerMultiprocessor = 227 * 1024, kReserved = 1024;
  const size_t blocks = kSharedPerMultiprocessor / (warps * warp_bytes + kReserved);
  return static_cast<int>(std::min<size_t>(blocks * warps, kMatrixDecodeMaxWarps));
}

// The plan: how many warps each (sequence, key/value head) takes, so that the launch fills one
// wave of resident warps without starting a second, thin one (a second wave doubles the time
// for a few percent more warps), each warp with at least kMinWarpKeys keys (its fixed costs:
// Q's load, the ring's start, the merge). Those warps go first into one block (a power of two,
// as many as the block's shared memory takes; merged in shared memory, no second launch), then
// into partitions of the context, merged by the second launch.
void choose_matrix_decode_split(MatrixDecodeArgs& a, int max_context, int multiprocessors,
                                size_t shared_per_block) {
  constexpr int kMinWarpKeys = 32;  // lint: not-a-warp (keys)
  a.partition = 0;
  a.parts = 1;
  a.warps = 1;
  const int64_t groups = static_cast<int64_t>(a.seqs) * a.kv_heads;
  if (groups == 0 || max_context <= 0) return;
  const size_t warp_bytes = matrix_decode_warp_bytes(a.head_dim, a.kv_bytes);
  const int64_t by_work = (max_context + kMinWarpKeys - 1) / kMinWarpKeys;
  // Warps per group that one wave of blocks of `warps` holds, and that have keys to take.
  auto wanted = [&](int warps) {
    const int64_t wave = static_cast<int64_t>(resident_warps(warp_bytes, warps)) * std::max(1, multiprocessors);
    return std::min(wave / groups, by_work);
  };
  int warps = 1;
  while (2 * warps <= kMatrixDecodeMaxWarps && 2 * warps * warp_bytes <= shared_per_block && 2 * warps <= wanted(2 * warps))
    warps *= 2;
  a.warps = warps;
  const int64_t parts = wanted(warps) / warps;
  if (parts <= 1) return;
  int64_t partition = (max_context + parts - 1) / parts;
  partition = (partition + kKeys - 1) / kKeys * kKeys;
  a.parts = static_cast<int>((max_context + partition - 1) / partition);
  a.partition = a.parts > 1 ? static_cast<int>(partition) : 0;
}

int64_t matrix_decode_workspace(const MatrixDecodeArgs& a) {
  return a.parts > 1 ? static_cast<int64_t>(a.seqs) * part_rows(a) * a.parts * (a.head_dim + 2) : 0;
}

template <class T, class C>
void matrix_decode_attention(const MatrixDecodeArgs& a, const T* q, const C* k_cache, const C* v_cache,
                             const KvScales& scales, const int32_t* block_tables, const int32_t* seq_info, const int32_t* decode_seqs,
                             float* workspace, int32_t* counters, T* out, int warp_size, cudaStream_t stream) {
  if (a.seqs == 0) return;
  LW_CHECK(a.kv_heads > 0 && a.q_heads % a.kv_heads == 0 && a.q_heads / a.kv_heads <= kMatrixDecodeRows,
           "matrix_decode_attention: " << a.q_heads << " query heads over " << a.kv_heads
                                       << " key/value heads (at most " << kMatrixDecodeRows << " per key/value head)");
  LW_CHECK(a.parts == 1 || (a.partition > 0 && a.partition % kKeys == 0 && workspace != nullptr),
           "matrix_decode_attention: a split needs partitions of a multiple of " << kKeys << " keys and a workspace");
  LW_CHECK(a.warps >= 1 && a.warps <= kMatrixDecodeMaxWarps,
           "matrix_decode_attention: " << a.warps << " warps per block (1 to " << kMatrixDecodeMaxWarps << ")");
  switch (a.head_dim) {
    case 64: launch_decode<T, C, 64>(a, q, k_cache, v_cache, scales, block_tables, seq_info, decode_seqs, workspace, counters, out, warp_size, stream); break;  // lint: not-a-warp
    case 80: launch_decode<T, C, 80>(a, q, k_cache, v_cache, scales, block_tables, seq_info, decode_seqs, workspace, counters, out, warp_size, stream); break;
    case 96: launch_decode<T, C, 96>(a, q, k_cache, v_cache, scales, block_tables, seq_info, decode_seqs, workspace, counters, out, warp_size, stream); break;
    case 128: launch_decode<T, C, 128>(a, q, k_cache, v_cache, scales, block_tables, seq_info, decode_seqs, workspace, counters, out, warp_size, stream); break;
    case 256: launch_decode<T, C, 256>(a, q, k_cache, v_cache, scales, block_tables, seq_info, decode_seqs, workspace, counters, out, warp_size, stream); break;
    default: LW_FAIL("matrix_decode_attention: head_dim " << a.head_dim << " is not one of 64, 80, 96, 128, 256");
  }
}

#define LW_MATRIX_DECODE(T, C)                                                                               \
  template void matrix_decode_attention<T, C>(const MatrixDecodeArgs&, const T*, const C*, const C*,            \
                                              const KvScales&, const int32_t*, const int32_t*, const int32_t*, \
                                              float*, int32_t*, T*, int, cudaStream_t);
#define LW_MATRIX_DECODE_ALL(T) LW_MATRIX_DECODE(T, T) LW_MATRIX_DECODE(T, uint8_t) LW_MATRIX_DECODE(T, int8_t)
LW_MATRIX_DECODE_ALL(half)
LW_MATRIX_DECODE_ALL(bfloat16)
#undef LW_MATRIX_DECODE_ALL
#undef LW_MATRIX_DECODE

}  // namespace lw::kernels
