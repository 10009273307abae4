#include "kernels/quant/int4.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "base/error.h"
#include "gpu/async_copy.h"
#include "gpu/cluster.h"
#include "gpu/last_block.h"
#include "gpu/launch.h"
#include "gpu/matrix_fragment.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"
#include "kernels/expert_rows.h"
#include "kernels/quant/int4_hopper.h"
#include "kernels/quant/int4_tiles.h"

namespace lw::kernels {

namespace {

namespace mma = gpu::mma;
using namespace int4_tiles;

constexpr int64_t kThreads = 256;
int64_t grid_for(int64_t n) { return std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

__global__ void unpack_kernel(uint8_t* out, const int32_t* src, Int4Unpack u) {
  const int64_t total = u.rows * u.cols, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t i = idx / u.cols + u.row0, j = idx % u.cols + u.col0;
    const int64_t c = u.col_perm ? u.col_perm[j] : j;
    const int64_t word = (i / u.row_div) * u.row_stride + (c / u.col_div) * u.col_stride;
    const int slot = static_cast<int>((u.pack_cols ? c : i) & 7);
    const uint32_t bits = word >= 0 && word < u.words ? static_cast<uint32_t>(src[word]) : 0u;
    out[idx] = static_cast<uint8_t>(((bits >> (4 * u.order[slot])) & 15u) + static_cast<uint32_t>(u.add));
  }
}

// A thread per word of the tiles.
__global__ void pack_kernel(uint32_t* tiles, const uint8_t* q, int64_t n, int64_t k, int64_t tiles_k, int64_t words) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t row_tiles = (n + kInt4TileRows - 1) / kInt4TileRows;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < words; idx += stride) {
    const int64_t tile = idx / kTileWords;
    const int w = static_cast<int>(idx - tile * kTileWords);
    int64_t row_tile, step;
    tile_place(tile, row_tiles, tiles_k, row_tile, step);
    const int64_t row0 = row_tile * kInt4TileRows, col0 = step * kInt4TileCols;
    const int lane = w / kLaneWords;
    uint32_t word = 0;
#pragma unroll
    for (int slot = 0; slot < 8; ++slot) {
      const int e = (w % kLaneWords) * 8 + slot, step = e / mma::kA, i = e % mma::kA;
      const int64_t r = row0 + mma::a_row(lane, i), c = col0 + 16 * step + mma::a_col(lane, i);
      const uint32_t v = r < n && c < k ? (q[r * k + c] & 15u) : 0u;
      word |= v << (4 * nibble_of(slot));
    }
    tiles[idx] = word;
  }
}

// A thread per word of the part's tiles.
__global__ void place_kernel(uint32_t* tiles, int64_t row_tiles, const uint32_t* part, int64_t part_row_tiles,
                             int64_t row_tile0, int64_t tiles_k) {
  const int64_t words = part_row_tiles * tiles_k * kTileWords, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < words; idx += stride) {
    const int64_t tile = idx / kTileWords;
    int64_t t, s;
    tile_place(tile, part_row_tiles, tiles_k, t, s);
    tiles[tile_index(row_tile0 + t, s, row_tiles, tiles_k) * kTileWords + (idx - tile * kTileWords)] = part[idx];
  }
}

// A warp per tile (a grid-stride loop over tiles): the data lanes put their runs' values into
// the warp's [16][64] bytes of shared memory through the layout's accessors (a pair of adjacent
// columns per store), then every lane expands whole 8-column chunks of rows: one scale and zero
// point per chunk (groups are multiples of 8 columns) and one 16-byte store (f16/bf16) where the
// columns are in order, so the writes are whole rows of the output.
constexpr int kExpandRowBytes = kInt4TileCols + 8;  // a row's bytes and padding: distinct banks
constexpr int kExpandTileBytes = kInt4TileRows * kExpandRowBytes;
constexpr int kChunks = kInt4TileRows * kInt4TileCols / 8;  // 8-column chunks of a tile
template <class T>
__global__ void expand_kernel(T* out, Int4Matrix w, const int32_t* perm, int64_t tiles_k, int64_t tiles) {
  constexpr int kWarps = static_cast<int>(kThreads) / gpu::kWarpSize;
  LW_DYNAMIC_SHARED(uint16_t, values);  // kWarps tiles of kExpandTileBytes
  const int warp = gpu::warp_id(), lane = gpu::lane_id();
  const auto* words = static_cast<const uint32_t*>(w.tiles);
  const int64_t groups = (w.k + w.group - 1) / w.group;
  const int base = warp * kExpandTileBytes / 2;  // this warp's tile, in 16-bit units
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t row_tiles = (w.n + kInt4TileRows - 1) / kInt4TileRows;
  for (int64_t tile = static_cast<int64_t>(blockIdx.x) * kWarps + warp; tile < tiles; tile += stride) {
    int64_t row_tile, step;
    tile_place(tile, row_tiles, tiles_k, row_tile, step);
    const int64_t row0 = row_tile * kInt4TileRows, col0 = step * kInt4TileCols;
    if (lane < kDataLanes) {
      uint32_t run[kLaneWords];
#pragma unroll
      for (int i = 0; i < kLaneWords; ++i) run[i] = words[tile * kTileWords + lane * kLaneWords + i];
#pragma unroll
      for (int e = 0; e < 4 * mma::kA; e += 2) {
        const int step = e / mma::kA, i = e % mma::kA;
        const int r = mma::a_row(lane, i), c = 16 * step + mma::a_col(lane, i);  // c even: c + 1 is the pair's other
        const uint32_t pair = run[e / 8] >> (4 * nibble_of(e % 8));
        values[base + (r * kExpandRowBytes + c) / 2] = static_cast<uint16_t>((pair & 15u) | ((pair >> 8) & 0xf00u));
      }
    }
    gpu::sync_warp();
    for (int chunk = lane; chunk < kChunks; chunk += gpu::kWarpSize) {
      const int r = chunk / (kInt4TileCols / 8), c = (chunk % (kInt4TileCols / 8)) * 8;
      const int64_t row = row0 + r, col = col0 + c;
      if (row >= w.n || col >= w.k) continue;  // K is a multiple of 8: a chunk is wholly in or out
      const int64_t g = row * groups + col / w.group;
      const float s = w.scales[g], z = static_cast<float>(w.zeros[g]);
      const auto q = gpu::load_vec_at<4, uint16_t>(values, base + (r * kExpandRowBytes + c) / 2);
      gpu::Vec<T, 8> v;
#pragma unroll
      for (int j = 0; j < 8; ++j)
        v.v[j] = gpu::from_float<T>((static_cast<float>((q.v[j / 2] >> (8 * (j % 2))) & 15u) - z) * s);
      if (perm) {
#pragma unroll
        for (int j = 0; j < 8; ++j) out[row * w.k + perm[col + j]] = v.v[j];
      } else {
        gpu::store_vec<8>(out + row * w.k + col, v);
      }
    }
    gpu::sync_warp();  // the values are read before the next tile's are written
  }
}


// The fused kernel (below) in numbers. A block is kGemmWarps warps, each over kRowTiles<NT>
// tiles of 16 weight rows, whose A fragments share each B fragment of x: 2 up to 16 rows of x
// (4 were slower at 1 and 16 rows), 4 at 32, 2 at 64 (the most whose two accumulator sets stay
// in registers: 250). On the H200 the larger counts made 32 and 64 rows 10-15% faster than 2
// and 1 (docs/PERFORMANCE.md).
constexpr int kGemmWarps = 4;
template <int NT>
constexpr int kRowTiles = NT == 2 ? 4 : 2;
// x's rows in shared memory: 64 columns as 32 words (pairs) and 4 words of padding, so that the
// lanes of a B fragment read distinct banks.
constexpr int kXWords = kInt4TileCols / 2 + 4;
constexpr int kTilePieces = static_cast<int>(kInt4TileBytes / 16);  // 16-byte pieces of a tile

// One entry of the block's ring: the weight tiles of one 64-column step for every warp's row
// tiles, then the step's columns of up to NT x 16 rows of x.
template <int NT>
constexpr int kEntryWeightWords = kGemmWarps * kRowTiles<NT> * kTileWords;
template <int NT>
constexpr int kEntryWords = kEntryWeightWords<NT> + NT * 16 * kXWords;
// Entries in the ring: the steps of kStages - 1 entries are on their way while the block
// multiplies one (copies in the background where the target has them: cp.async); as many as
// fit the shared memory a launch gets without opting in, up to LW_INT4_GEMM_STAGES.
#ifndef LW_INT4_GEMM_STAGES
#define LW_INT4_GEMM_STAGES 4
#endif
constexpr int kSharedLimit = 48 * 1024;
template <int NT>
constexpr int kStages = LW_INT4_GEMM_STAGES < kSharedLimit / (4 * kEntryWords<NT>) ? LW_INT4_GEMM_STAGES
                                                                                   : kSharedLimit / (4 * kEntryWords<NT>);
static_assert(kStages<1> >= 2 && kStages<2> >= 2 && kStages<4> >= 2, "a ring of one entry has nothing in flight");

// What a block of the fused kernels covers: its split's 64-column tiles [first, last) of the
// matrix's tiles_k, and row tiles from block_tile0 (kGemmWarps x R of them). A group of K columns
// or more is one group (its size need not fit 32 bits).
struct BlockSpan {
  int k, n, tiles_k, row_tiles, group_cols, groups, first, last, block_tile0;
};
template <int R>
LW_DEVICE_INLINE BlockSpan block_span(const Int4Matrix& w, int tiles_per_split) {
  BlockSpan b;
  b.k = static_cast<int>(w.k);
  b.n = static_cast<int>(w.n);
  b.tiles_k = static_cast<int>((b.k + kInt4TileCols - 1) / kInt4TileCols);
  b.row_tiles = static_cast<int>((b.n + kInt4TileRows - 1) / kInt4TileRows);
  b.group_cols = static_cast<int>(w.group < w.k ? w.group : w.k);
  b.groups = (b.k + b.group_cols - 1) / b.group_cols;
  b.first = static_cast<int>(blockIdx.y) * tiles_per_split;
  b.last = min(b.first + tiles_per_split, b.tiles_k);
  b.block_tile0 = static_cast<int>(blockIdx.x) * kGemmWarps * R;
  return b;
}

// The end of a block of the fused kernels: each warp's sums `total` of its R row tiles (first rows
// row0) and NT tiles of x (their first C elements: narrow products compute no others) go to y
// (one split: + bias) or to the split's plane of `workspace` (plane_rows rows of n apart: m, or
// every row of a grouped launch), which the last of the row block's splits to finish adds when
// there are counters (else reduce_splits_kernel does).
template <class T, int R, int NT, int C = mma::kC>
LW_DEVICE_INLINE void finish_rows(T* y, const mma::FragC (&total)[R][NT], const int (&row0)[R], const T* bias, int m, int n,
                                  int64_t ldy, float* workspace, int64_t plane_rows, int32_t* counters, int block_tile0) {
  const int lane = gpu::lane_id(), tid = static_cast<int>(threadIdx.x);
  constexpr int kBlockThreads = kGemmWarps * gpu::kWarpSize;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < C; ++i) {
        const int row = row0[r] + mma::c_row(lane, i), tok = nt * 16 + mma::c_col(lane, i);
        if (row >= n || tok >= m) continue;
        const float v = total[r][nt].x[i];
        if (gridDim.y == 1) {
          y[tok * ldy + row] = gpu::from_float<T>(v + (bias ? gpu::to_float(bias[row]) : 0.0f));
        } else {
          workspace[(static_cast<int64_t>(blockIdx.y) * plane_rows + tok) * n + row] = v;
        }
      }
  if (gridDim.y == 1 || counters == nullptr) return;
  // The last of the row block's splits to finish adds them (in split order, as
  // reduce_splits_kernel does).
  if (!gpu::last_to_arrive(counters + blockIdx.x, static_cast<int>(gridDim.y))) return;
  const int block_row0 = block_tile0 * static_cast<int>(kInt4TileRows);
  const int block_rows = min(kGemmWarps * R * static_cast<int>(kInt4TileRows), n - block_row0);
  // Each of the thread's elements of the row block: kSplitsAhead of its splits loaded at once,
  // then added in split order (as reduce_splits_kernel adds them), so that the sum waits for one
  // L2 latency per kSplitsAhead splits, not one per few (one row of x: one element a thread, 16
  // splits at Llama-3-8B's o and down projections on an H100). kSplitsAhead floats: more (all of a
  // thread's elements at once) took the streamed kernel to 255 registers.
  const int64_t plane = plane_rows * n;
  constexpr int kSplitsAhead = 16;
  const int splits = static_cast<int>(gridDim.y);
  for (int e = tid; e < m * block_rows; e += kBlockThreads) {
    const int tok = e / block_rows, row = block_row0 + e % block_rows;
    const float* from = workspace + static_cast<int64_t>(tok) * n + row;
    float v = 0.0f;
    for (int sp0 = 0; sp0 < splits; sp0 += kSplitsAhead) {
      float part[kSplitsAhead];
#pragma unroll
      for (int j = 0; j < kSplitsAhead; ++j)
        part[j] = sp0 + j < splits ? gpu::load_from_other_block(from + (sp0 + j) * plane) : 0.0f;
#pragma unroll
      for (int j = 0; j < kSplitsAhead; ++j)
        if (sp0 + j < splits) v += part[j];
    }
    y[tok * ldy + row] = gpu::from_float<T>(v + (bias ? gpu::to_float(bias[row]) : 0.0f));
  }
}

#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// finish_rows for a row block whose splits are one cluster of blocks (blockIdx.y each one's
// rank): each block puts its sums in its own shared memory (`sums`: m rows of the block's rows),
// and after the cluster's barrier the block of rank r adds the elements r, r + splits, ... of
// the row block in split order from every block's shared memory (the order of the counted path:
// the same bits), no store, fence or count through global memory on the way. The second barrier
// keeps each block's shared memory until the others have read it.
template <class T, int R>
LW_DEVICE_INLINE void finish_rows_in_cluster(T* y, const mma::FragC (&total)[R][1], const int (&row0)[R], const T* bias, int m,
                                             int n, int64_t ldy, float* sums, int block_tile0) {
  const int lane = gpu::lane_id(), tid = static_cast<int>(threadIdx.x);
  constexpr int kBlockThreads = kGemmWarps * gpu::kWarpSize;
  constexpr int kBlockRows = kGemmWarps * R * static_cast<int>(kInt4TileRows);
  const int block_row0 = block_tile0 * static_cast<int>(kInt4TileRows);
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < mma::kNarrowC; ++i) {
      const int row = row0[r] + mma::c_row(lane, i), tok = mma::c_col(lane, i);
      if (row < n && tok < m) sums[tok * kBlockRows + row - block_row0] = total[r][0].x[i];
    }
  gpu::cluster_barrier();
  const int splits = static_cast<int>(gridDim.y), rank = static_cast<int>(blockIdx.y);
  const int block_rows = min(kBlockRows, n - block_row0);
  const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(sums));
  for (int e = rank + splits * tid; e < m * block_rows; e += splits * kBlockThreads) {
    const int tok = e / block_rows, row = e % block_rows;
    const uint32_t at = local + static_cast<uint32_t>(sizeof(float) * (tok * kBlockRows + row));
    const float v = gpu::cluster_sum_in_order<static_cast<int>(gpu::kMostClusterBlocks)>(at, splits);
    y[tok * ldy + block_row0 + row] = gpu::from_float<T>(v + (bias ? gpu::to_float(bias[block_row0 + row]) : 0.0f));
  }
  gpu::cluster_barrier();
}
#endif

// y[:m] = x[:m] @ W^T for the block's kGemmWarps x kRowTiles row tiles and split of k
// (blockIdx.y; `tiles_per_split` 64-column tiles each). The block fills its ring of steps with
// every thread; each warp multiplies its own row tiles with NT tiles of 16 rows of x (the MMA's
// N; kNarrow: x has at most 8 rows, the MMA's first 8 columns), its A fragments decoded from
// the entry's words and x's B fragments loaded from the entry's columns; rows of x past m are
// zeros. A group's products accumulate in fp32 and are scaled when the group ends. With one
// split the warp writes y; else its partial sums go to `workspace`, which the last of the row
// block's splits to finish adds (or, without counters, reduce_splits_kernel).
template <class T, int NT, bool kNarrow>
__global__ void gemm_kernel(T* y, const T* x, Int4Matrix w, const T* bias, int m, int ldx, int64_t ldy,
                            int tiles_per_split, bool x_vectors, float* workspace, int32_t* counters) {
  gpu::begin_after_prior_grid();
  static_assert(!kNarrow || NT == 1, "narrow products serve one tile of x");
  constexpr int R = kRowTiles<NT>, S = kStages<NT>, E = kEntryWords<NT>;
  LW_DYNAMIC_SHARED(uint32_t, ring);
  LW_DYNAMIC_SHARED(T, ring_elements);  // the same memory as elements of x
#if LW_MATRIX_CORES
  const int warp = gpu::warp_id(), lane = gpu::lane_id();
  const int tid = static_cast<int>(threadIdx.x);
  const BlockSpan block = block_span<R>(w, tiles_per_split);
  const int k = block.k, n = block.n, tiles_k = block.tiles_k, row_tiles = block.row_tiles, group_cols = block.group_cols,
            groups = block.groups, first = block.first, last = block.last, block_tile0 = block.block_tile0;
  // Row tiles past the matrix read the last one again (their results are not written): the
  // tile's step 0 and the words between its steps.
  auto tile_row = [&](int j) {
    const int t = min(block_tile0 + j, row_tiles - 1);
    return static_cast<const uint32_t*>(w.tiles) + tile_index(t, 0, row_tiles, tiles_k) * kTileWords;
  };
  auto step_words = [&](int j) {
    return static_cast<int>(band_width(min(block_tile0 + j, row_tiles - 1), row_tiles)) * kTileWords;
  };
  int row0[R];
#pragma unroll
  for (int r = 0; r < R; ++r) row0[r] = (block_tile0 + warp * R + r) * static_cast<int>(kInt4TileRows);

  // Each thread's 16-byte pieces of a ring entry, the same for every step: where they go in the
  // entry and where they come from at step 0 (-1: no piece).
  constexpr int kBlockThreads = kGemmWarps * gpu::kWarpSize;
  constexpr int kWeightPieces = kGemmWarps * R * kTilePieces, kXPieces = NT * 16 * 8;
  constexpr int kWeightCopies = (kWeightPieces + kBlockThreads - 1) / kBlockThreads;
  constexpr int kXCopies = (kXPieces + kBlockThreads - 1) / kBlockThreads;
  const uint32_t* weight_src[kWeightCopies];
  int weight_dst[kWeightCopies], weight_step[kWeightCopies];
#pragma unroll
  for (int c = 0; c < kWeightCopies; ++c) {
    const int e = tid + c * kBlockThreads, j = e / kTilePieces, piece = e % kTilePieces;
    weight_dst[c] = e < kWeightPieces ? j * kTileWords + piece * 4 : -1;
    weight_src[c] = tile_row(e < kWeightPieces ? j : 0) + piece * 4;
    weight_step[c] = step_words(e < kWeightPieces ? j : 0);
  }
  const T* x_src[kXCopies];
  int x_dst[kXCopies], x_col[kXCopies];
#pragma unroll
  for (int c = 0; c < kXCopies; ++c) {
    const int e = tid + c * kBlockThreads, row = e / 8, piece = e % 8;
    x_dst[c] = e < kXPieces && row < m ? row * kXWords + piece * 4 : -1;
    x_col[c] = piece * 8;
    x_src[c] = x + static_cast<int64_t>(row < m ? row : 0) * ldx + x_col[c];
  }
  // Step t (a 64-column tile) into ring entry `slot`; always one commit, so that the wait below
  // counts steps. x's columns past K are zeros (K is a multiple of 8: a 16-byte piece is wholly
  // in or out).
  auto load_entry = [&](int t, int slot) {
    if (t < last) {
      const auto entry = ring + slot * E;
#pragma unroll
      for (int c = 0; c < kWeightCopies; ++c)
        if (kWeightPieces % kBlockThreads == 0 || weight_dst[c] >= 0)
          gpu::copy_16_async(entry, weight_dst[c], weight_src[c] + t * weight_step[c]);
      const auto xs = entry + kEntryWeightWords<NT>;
      const int k0 = t * kInt4TileCols;
      if (x_vectors) {
        // Pieces past K are zero-filled by the copy itself (from a valid address: no branch).
#pragma unroll
        for (int c = 0; c < kXCopies; ++c) {
          if (x_dst[c] < 0) continue;
          const bool in = k0 + x_col[c] < k;
          gpu::copy_16_async_or_zero(xs, x_dst[c], reinterpret_cast<const uint32_t*>(x_src[c] + (in ? k0 : 0)), in);
        }
      } else {
        constexpr int kRowPairs = kInt4TileCols / 2;
        for (int e = tid; e < m * kRowPairs; e += kBlockThreads) {
          const int row = e / kRowPairs, word = e % kRowPairs;
          const int col = k0 + word * 2;
          if (col < k)
            gpu::copy_4_async(xs, row * kXWords + word, reinterpret_cast<const uint32_t*>(x + static_cast<int64_t>(row) * ldx + col));
          else
            xs[row * kXWords + word] = 0u;
        }
      }
    }
    gpu::async_commit();
  };

  // This group's scales (one per row slot of C) and zero points (one per pair of A elements);
  // where groups are whole tiles, the next group's are loaded with the tile before it starts.
  // Rows past the matrix read its last row.
  struct Params {
    float scale[R][mma::kRowSlots];
    uint32_t zbias[R][mma::kA / 2];
  };
  int slot_at[R][mma::kRowSlots], pair_at[R][mma::kA / 2];  // the row's first parameter
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int sl = 0; sl < mma::kRowSlots; ++sl) slot_at[r][sl] = min(row0[r] + mma::slot_row(lane, sl), n - 1) * groups;
#pragma unroll
    for (int p = 0; p < mma::kA / 2; ++p) pair_at[r][p] = min(row0[r] + mma::a_row(lane, 2 * p), n - 1) * groups;
  }
  Params params, next_params;
  auto load_group = [&](int g, Params& to) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int sl = 0; sl < mma::kRowSlots; ++sl) to.scale[r][sl] = w.scales[slot_at[r][sl] + g];
#pragma unroll
      for (int p = 0; p < mma::kA / 2; ++p) to.zbias[r][p] = (kMagic<T> + w.zeros[pair_at[r][p] + g]) * 0x10001u;
    }
  };
  const bool ahead = group_cols % kInt4TileCols == 0 || group_cols >= k;

  mma::FragC total[R][NT], sums[R][NT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      mma::fill(total[r][nt], 0.0f);
      mma::fill(sums[r][nt], 0.0f);
    }
  // The current group and the column where the next begins (no division per step).
  int group = first * kInt4TileCols / group_cols, next_group_at = (group + 1) * group_cols;
  if (first < last) load_group(group, params);
  auto fold = [&]() {  // the group's sums times their rows' scales
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < mma::kC; ++i) {
        const float s = params.scale[r][mma::c_slot(i)];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          total[r][nt].x[i] += s * sums[r][nt].x[i];
          sums[r][nt].x[i] = 0.0f;
        }
      }
  };

  // Rows of x past m are zeros in every entry (the copies never write them; the first barrier
  // below makes them visible).
  const int pad_words = (NT * 16 - m) * kXWords;
#pragma unroll
  for (int e = 0; e < S; ++e)
    for (int i = tid; i < pad_words; i += kBlockThreads) ring[e * E + kEntryWeightWords<NT> + m * kXWords + i] = 0u;
#pragma unroll
  for (int d = 0; d < S - 1; ++d) load_entry(first + d, d);
  int slot = 0;  // the entry of step t; step t + S - 1 goes to the one before it
  for (int t = first; t < last; ++t, slot = slot + 1 == S ? 0 : slot + 1) {
    gpu::async_wait<S - 2>();  // step t is in (this thread's pieces) ...
    __syncthreads();           // ... and every thread's; every warp is done with step t - 1
    load_entry(t + S - 1, slot == 0 ? S - 1 : slot - 1);
    const auto entry = ring + slot * E;
    const auto xs = ring_elements + (slot * E + kEntryWeightWords<NT>) * 2;
    uint32_t words[R][kLaneWords];
    {
      constexpr int V = kLaneWords < 4 ? kLaneWords : 4;
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < kLaneWords; c += V) {
          const auto v = gpu::load_vec_at<V, uint32_t>(entry, (warp * R + r) * kTileWords + (lane % kDataLanes) * kLaneWords + c);
#pragma unroll
          for (int e = 0; e < V; ++e) words[r][c + e] = v.v[e];
        }
    }
    // Where groups are whole tiles they begin with a tile: the parameters loaded a tile ago
    // take over before the next group's are loaded into their place.
    if (ahead && t * kInt4TileCols >= next_group_at) {
      fold();
      ++group;
      next_group_at += group_cols;
      params = next_params;
    }
    if (ahead && t + 1 < last && (t + 1) * kInt4TileCols >= next_group_at) load_group(group + 1, next_params);
    // One 16-column step: x's B fragments (B(k, n) = x[n, k]: x's rows in the entry read as a
    // transposed B; rows past m are zeros) times every row tile's A fragments, decoded from its
    // words.
    auto multiply = [&](int step) {
      mma::FragB<T> b[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        mma::load_b_transposed_shared(b[nt], xs + (nt * 16 * kXWords + 8 * step) * 2, 2 * kXWords);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        mma::FragA<T> a;
#pragma unroll
        for (int i = 0; i < mma::kA; i += 2) {
          const int e = step * mma::kA + i;
          decode_pair<T>(words[r][e >> 3], (e & 7) >> 1, params.zbias[r][i / 2], a.x[i], a.x[i + 1]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          if constexpr (kNarrow) mma::mma_narrow(sums[r][nt], a, b[nt], sums[r][nt]);
          else mma::mma(sums[r][nt], a, b[nt], sums[r][nt]);
        }
      }
    };
    const int tile_end = (t + 1) * kInt4TileCols;
    if (tile_end <= k && (ahead || next_group_at >= tile_end)) {
#pragma unroll
      for (int step = 0; step < kSteps; ++step) multiply(step);  // the common case: no checks per step
    } else {
#pragma unroll
      for (int step = 0; step < kSteps; ++step) {
        const int k0 = t * kInt4TileCols + 16 * step;
        if (k0 >= k) break;
        if (!ahead && k0 >= next_group_at) {  // a group that begins inside the tile
          fold();
          ++group;
          next_group_at += group_cols;
          load_group(group, params);
        }
        multiply(step);
      }
    }
  }
  gpu::async_wait<0>();  // no copy outlives the block (the ring's tail entries are empty commits)
  if (first < last) fold();
  finish_rows<T, R, NT>(y, total, row0, bias, m, n, ldy, workspace, m, counters, block_tile0);
#else
  (void)ring, (void)ring_elements, (void)y, (void)x, (void)w, (void)bias, (void)m, (void)ldx, (void)ldy, (void)tiles_per_split, (void)x_vectors,
      (void)workspace, (void)counters;
#endif
}

// The few-row kernel: up to mma::kNarrowCols rows of x, groups of whole tiles (or one group).
// The same blocks, splits, fragments and order of arithmetic as gemm_kernel's narrow products,
// so the same bits, over another data path: each warp streams its row tiles' runs from memory
// straight into registers kRunsAhead tiles ahead (a lane's run of a tile is its A fragments: no
// shared memory, no barrier in the loop), and x's columns of the block's split are copied to
// shared memory once. The first runs and the group parameters are requested before the wait
// for the kernel before (which writes x), so that their latency overlaps its end. (Runs copied
// into a ring of shared memory instead, 4 to 8 tiles ahead at 72 registers, and blocks of eight
// warps of one row tile each measured slower on the H200: docs/PERFORMANCE.md.)
#ifndef LW_INT4_GEMV_RUNS_AHEAD
#define LW_INT4_GEMV_RUNS_AHEAD 4
#endif
constexpr int kRunsAhead = LW_INT4_GEMV_RUNS_AHEAD;
// The body of the streamed kernels: the block's row tiles and split of w over m rows of x, xs
// the dynamic shared memory (m rows of the split's columns, then 8 zeros; with cluster_sums,
// then the block's sums for finish_rows_in_cluster).
#if LW_MATRIX_CORES
template <class T>
LW_DEVICE_INLINE void gemv_rows(T* xs, T* y, const T* x, const Int4Matrix& w, const T* bias, int m, int ldx, int64_t ldy,
                                int tiles_per_split, bool x_vectors, const int32_t* x_perm, Int4Gate gate, float* workspace,
                                int64_t plane_rows, int32_t* counters, bool cluster_sums = false) {
  constexpr int R = kRowTiles<1>, D = kRunsAhead;
  constexpr int V = kLaneWords < 4 ? kLaneWords : 4;
  const int warp = gpu::warp_id(), lane = gpu::lane_id();
  const int tid = static_cast<int>(threadIdx.x);
  constexpr int kBlockThreads = kGemmWarps * gpu::kWarpSize;
  const BlockSpan block = block_span<R>(w, tiles_per_split);
  const int k = block.k, n = block.n, tiles_k = block.tiles_k, row_tiles = block.row_tiles, group_cols = block.group_cols,
            groups = block.groups, first = block.first, last = block.last, block_tile0 = block.block_tile0;
  int row0[R];
  // This lane's run of the row tile's step 0 and the words between its steps; rows past the
  // matrix read the last row tile.
  const uint32_t* runs[R];
  int run_step[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int t = block_tile0 + warp * R + r, read = min(t, row_tiles - 1);
    row0[r] = t * static_cast<int>(kInt4TileRows);
    runs[r] = static_cast<const uint32_t*>(w.tiles) + tile_index(read, 0, row_tiles, tiles_k) * kTileWords +
              (lane % kDataLanes) * kLaneWords;
    run_step[r] = static_cast<int>(band_width(read, row_tiles)) * kTileWords;
  }
  uint32_t queue[D][R][kLaneWords];
  auto load_runs = [&](int t, uint32_t (&to)[R][kLaneWords]) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < kLaneWords; c += V) {
        const auto v = load_run<V>(runs[r] + t * run_step[r] + c);
#pragma unroll
        for (int e = 0; e < V; ++e) to[r][c + e] = v.v[e];
      }
  };
  // The first kEarly tiles' runs before the wait, the others after x's copy is asked for, all
  // without a condition (a split of fewer than D tiles reads its last tile again, an empty one
  // the row's last): with every run or a conditional one before the wait, the compiler moved
  // some of their registers there, which waited for the data and put the loads' whole latency
  // before x's copy instead of beside it (Nsight Compute, H100: 17% of the kernel's stall
  // samples on those moves; docs/PERFORMANCE.md).
  const int last_loaded = min(max(first, last - 1), tiles_k - 1);
  constexpr int kEarly = D < 2 ? D : 2;
#pragma unroll
  for (int d = 0; d < kEarly; ++d) load_runs(min(first + d, last_loaded), queue[d]);

  // The group's scales (one per row slot of C) and zero points (one per row slot of A), the
  // next group's loaded as soon as the one before it takes over. Rows past the matrix read its
  // last row. The zero points are turned into decode biases only where a group takes over (the
  // first group's after x is staged), so that no instruction waits for their loads before then.
  // (int4_tiles.h's GroupParams, which the Hopper kernel uses, does the same: here in place, as
  // the struct made this kernel 2-3.5% slower at one row on the H100, docs/PERFORMANCE.md.)
  struct Params {
    float scale[R][mma::kRowSlots];
    uint32_t zero[R][mma::kARowSlots];
  };
  int slot_at[R][mma::kRowSlots], a_slot_at[R][mma::kARowSlots];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int sl = 0; sl < mma::kRowSlots; ++sl) slot_at[r][sl] = min(row0[r] + mma::slot_row(lane, sl), n - 1) * groups;
#pragma unroll
    for (int sl = 0; sl < mma::kARowSlots; ++sl) a_slot_at[r][sl] = min(row0[r] + mma::a_slot_row(lane, sl), n - 1) * groups;
  }
  auto load_group = [&](int g, Params& to) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int sl = 0; sl < mma::kRowSlots; ++sl) to.scale[r][sl] = w.scales[slot_at[r][sl] + g];
#pragma unroll
      for (int sl = 0; sl < mma::kARowSlots; ++sl) to.zero[r][sl] = w.zeros[a_slot_at[r][sl] + g];
    }
  };
  const int split_end = min(last * static_cast<int>(kInt4TileCols), k);
  int group = first * static_cast<int>(kInt4TileCols) / group_cols, next_group_at = (group + 1) * group_cols;
  Params params, next_params;
  if (first < last) load_group(group, params);
  if (next_group_at < split_end) load_group(group + 1, next_params);
  uint32_t zbias[R][mma::kARowSlots];  // (magic + zero) in both 16-bit halves, for decode_pair
  auto take_zeros = [&]() {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int sl = 0; sl < mma::kARowSlots; ++sl) zbias[r][sl] = (kMagic<T> + params.zero[r][sl]) * 0x10001u;
  };

  // x's columns [first, last) tiles of its m rows (columns past K: zeros), then the zero row.
  gpu::begin_after_prior_grid();
  const int col0 = first * static_cast<int>(kInt4TileCols), span = tiles_per_split * static_cast<int>(kInt4TileCols);
  const int xs_ld = span + 8;
  const int pieces = span / 8;  // 8-element pieces of a row (K is a multiple of 8: a piece is wholly in or out)
  // Eight of x's elements from `from` (x_perm: the tiles' columns j.. of the row at `from`).
  auto load_piece = [&](const T* from, int j0) {
    gpu::Vec<T, 8> v;
    if (x_perm) {  // act order: the tiles' column j is x's column x_perm[j]
#pragma unroll
      for (int j = 0; j < 8; ++j) v.v[j] = from[x_perm[j0 + j]];
    } else if (x_vectors) {
      v = gpu::load_vec<8>(from + j0);
    } else {
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        const auto pair = gpu::load_vec<2>(from + j0 + j);
        v.v[j] = pair.v[0];
        v.v[j + 1] = pair.v[1];
      }
    }
    return v;
  };
  for (int e = tid; e < m * pieces; e += kBlockThreads) {
    const int row = e / pieces, c = (e % pieces) * 8;
    gpu::Vec<T, 8> v;
    if (col0 + c < k) {
      const T* x_row = x + static_cast<int64_t>(row) * ldx;
      v = load_piece(x_row, col0 + c);
      if (gate.on) {  // x's row is gate then up: the product rounded once, as act_mul rounds it
        const gpu::Vec<T, 8> up = load_piece(x_row + k, col0 + c);
#pragma unroll
        for (int j = 0; j < 8; ++j) v.v[j] = gpu::from_float<T>(gated(gate.act, gpu::to_float(v.v[j]), gpu::to_float(up.v[j])));
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) v.v[j] = gpu::from_float<T>(0.0f);
    }
    gpu::store_vec_at<8>(xs, row * xs_ld + c, v);
  }
  if (tid < 8) xs[m * xs_ld + tid] = gpu::from_float<T>(0.0f);
#pragma unroll
  for (int d = kEarly; d < D; ++d) load_runs(min(first + d, last_loaded), queue[d]);
  __syncthreads();
  const auto zeros = xs + m * xs_ld;
  if (first < last) take_zeros();

  mma::FragC total[R][1], sums[R][1];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    mma::fill(total[r][0], 0.0f);
    mma::fill(sums[r][0], 0.0f);
  }
  auto fold = [&]() {  // the group's sums times their rows' scales (as gemm_kernel's fold)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < mma::kNarrowC; ++i) {
        const float s = params.scale[r][mma::c_slot(i)];
        total[r][0].x[i] += s * sums[r][0].x[i];
        sums[r][0].x[i] = 0.0f;
      }
  };
  auto multiply = [&](int t, int step, const uint32_t (&words)[R][kLaneWords]) {
    mma::FragB<T> b;
    mma::load_b_narrow_transposed_shared(b, xs + (t - first) * static_cast<int>(kInt4TileCols) + 16 * step, xs_ld, m, zeros);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      mma::FragA<T> a;
#pragma unroll
      for (int i = 0; i < mma::kA; i += 2) {
        const int e = step * mma::kA + i;
        decode_pair<T>(words[r][e >> 3], (e & 7) >> 1, zbias[r][mma::a_slot(i)], a.x[i], a.x[i + 1]);
      }
      mma::mma_narrow(sums[r][0], a, b, sums[r][0]);
    }
  };
  for (int t0 = first; t0 < last; t0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int t = t0 + d;
      if (t >= last) break;
      uint32_t words[R][kLaneWords];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < kLaneWords; ++c) words[r][c] = queue[d][r][c];
      if (t + D < last) load_runs(t + D, queue[d]);
      const int tile_col = t * static_cast<int>(kInt4TileCols);
      if (tile_col >= next_group_at) {  // groups are whole tiles: a new one begins with this tile
        fold();
        ++group;
        next_group_at += group_cols;
        params = next_params;
        take_zeros();
        if (next_group_at < split_end) load_group(group + 1, next_params);
      }
      if (tile_col + static_cast<int>(kInt4TileCols) <= k) {
#pragma unroll
        for (int step = 0; step < kSteps; ++step) multiply(t, step, words);
      } else {
#pragma unroll
        for (int step = 0; step < kSteps; ++step)
          if (tile_col + 16 * step < k) multiply(t, step, words);
      }
    }
  }
  if (first < last) fold();
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (cluster_sums) {
    // The sums after x's rows, on a 16-byte boundary (gemv_cluster_shared_bytes).
    const int sums_at = ((m * xs_ld + 8) * static_cast<int>(sizeof(T)) + 15) / 16 * 16;
    finish_rows_in_cluster<T, R>(y, total, row0, bias, m, n, ldy, reinterpret_cast<float*>(reinterpret_cast<char*>(xs) + sums_at),
                                 block_tile0);
    return;
  }
#endif
  finish_rows<T, R, 1, mma::kNarrowC>(y, total, row0, bias, m, n, ldy, workspace, plane_rows, counters, block_tile0);
}
#endif

template <class T>
__global__ void gemv_kernel(T* y, const T* x, Int4Matrix w, const T* bias, int m, int ldx, int64_t ldy, int tiles_per_split,
                            bool x_vectors, const int32_t* x_perm, Int4Gate gate, float* workspace, int32_t* counters,
                            bool cluster_sums) {
  LW_DYNAMIC_SHARED(T, xs);
#if LW_MATRIX_CORES
  gemv_rows<T>(xs, y, x, w, bias, m, ldx, ldy, tiles_per_split, x_vectors, x_perm, gate, workspace, m, counters, cluster_sums);
#else
  (void)xs, (void)y, (void)x, (void)w, (void)bias, (void)m, (void)ldx, (void)ldy, (void)tiles_per_split, (void)x_vectors,
      (void)x_perm, (void)gate, (void)workspace, (void)counters, (void)cluster_sums;
#endif
}

// The streamed kernel over one matrix per expert: rows [offsets[z], offsets[z + 1]) of x (read
// on the device: no host synchronisation), up to mma::kNarrowCols a pass, each pass reading the
// expert's tiles again. By expert, blockIdx.z is the expert and its block runs its passes one
// after another; by row (at most a row per four experts: most have none), blockIdx.z is a row
// of x and its block runs the pass that begins there, if one does, so that no block is spent on
// an expert without rows. Splits write `workspace` planes of every row (`rows`), which
// reduce_splits_kernel adds. Offsets out of [0, rows] or decreasing make the blocks do nothing
// (the op's caller makes them; moe_permutation's are in range).
// NVIDIA: the dense kernel's four blocks per multiprocessor (the passes' bookkeeping took it to
// 159 registers, three blocks, without the bound).
#if defined(LW_TARGET_CUDA)
#define LW_INT4_GROUPED_BOUNDS __launch_bounds__(kGemmWarps * 32, 4)  // lint: not-a-warp (CUDA's warp)
#else
#define LW_INT4_GROUPED_BOUNDS
#endif
template <class T, bool kByRow>
__global__ void LW_INT4_GROUPED_BOUNDS grouped_gemv_kernel(T* y, const T* x, const Int4Matrix* experts, const int32_t* offsets, int count,
                                    int rows, int ldx, int64_t ldy, int tiles_per_split, bool x_vectors, float* workspace) {
  LW_DYNAMIC_SHARED(T, xs);
#if LW_MATRIX_CORES
  gpu::begin_after_prior_grid();  // the offsets come from the kernel before
  int z = static_cast<int>(blockIdx.z), begin, end;
  if constexpr (kByRow) {
    ExpertPass pass;
    if (!pass_at_row(offsets, count, rows, blockIdx.z, mma::kNarrowCols, pass)) return;
    z = pass.expert;
    begin = static_cast<int>(blockIdx.z);
    end = static_cast<int>(pass.end);
  } else {
    begin = offsets[z];
    end = offsets[z + 1];
    if (begin < 0 || end > rows || begin >= end) return;
  }
  const Int4Matrix w = experts[z];
  for (int r0 = begin; r0 < end; r0 += mma::kNarrowCols) {
    if (r0 > begin) __syncthreads();  // every warp is done with the pass's x before it is overwritten
    const int m = min(end - r0, mma::kNarrowCols);
    gemv_rows<T>(xs, y + r0 * ldy, x + static_cast<int64_t>(r0) * ldx, w, static_cast<const T*>(nullptr), m, ldx, ldy,
                 tiles_per_split, x_vectors, nullptr, Int4Gate{}, workspace ? workspace + static_cast<int64_t>(r0) * w.n : nullptr, rows,
                 nullptr);
  }
#else
  (void)xs, (void)y, (void)x, (void)experts, (void)offsets, (void)count, (void)rows, (void)ldx, (void)ldy,
      (void)tiles_per_split, (void)x_vectors, (void)workspace;
#endif
}

// y = the splits' partial sums added in split order (+ bias).
template <class T>
__global__ void reduce_splits_kernel(T* y, const float* workspace, const T* bias, int64_t m, int64_t n, int64_t ldy,
                                     int splits) {
  gpu::begin_after_prior_grid();
  const int64_t total = m * n, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t tok = idx / n, row = idx - tok * n;
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += workspace[s * total + idx];
    y[tok * ldy + row] = gpu::from_float<T>(v + (bias ? gpu::to_float(bias[row]) : 0.0f));
  }
}

template <class T>
__global__ void gather_columns_kernel(T* out, const T* x, const int32_t* perm, int64_t rows, int64_t k, int64_t ldx) {
  const int64_t total = rows * k, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t r = idx / k, j = idx - r * k;
    out[idx] = x[r * ldx + perm[j]];
  }
}

void check_matrix(const char* op, const Int4Matrix& w) {
  LW_CHECK(w.n > 0 && w.k > 0 && w.k % 8 == 0 && w.group > 0 && w.tiles && w.scales && w.zeros,
           op << ": a 4-bit matrix of [" << w.n << ", " << w.k << "], group " << w.group << " is incomplete");
  // The expansion takes one scale and zero point per 8-column chunk.
  LW_CHECK(w.group % 8 == 0 || w.group >= w.k,
           op << ": groups of " << w.group << " columns of K = " << w.k << " are not whole 8-column chunks");
}

}  // namespace

void int4_unpack(uint8_t* out, const int32_t* src, const Int4Unpack& u, cudaStream_t stream) {
  LW_CHECK(u.rows > 0 && u.cols > 0 && (u.row_div == 1 || u.row_div == 8) && (u.col_div == 1 || u.col_div == 8),
           "int4_unpack: [" << u.rows << ", " << u.cols << "] with divisors " << u.row_div << ", " << u.col_div);
  const int64_t total = u.rows * u.cols;
  gpu::launch("int4_unpack", unpack_kernel, {dim3(static_cast<unsigned>(grid_for(total))), dim3(kThreads), 0, stream}, out,
              src, u);
}

void int4_pack_tiles(void* tiles, const uint8_t* q, int64_t n, int64_t k, cudaStream_t stream) {
  LW_CHECK(n > 0 && k > 0, "int4_pack_tiles: [" << n << ", " << k << "]");
  const int64_t tiles_k = (k + kInt4TileCols - 1) / kInt4TileCols, words = int4_tile_count(n, k) * kTileWords;
  gpu::launch("int4_pack_tiles", pack_kernel, {dim3(static_cast<unsigned>(grid_for(words))), dim3(kThreads), 0, stream},
              static_cast<uint32_t*>(tiles), q, n, k, tiles_k, words);
}

void int4_place_tiles(void* tiles, int64_t n, const void* part, int64_t n_part, int64_t row_tile0, int64_t k,
                      cudaStream_t stream) {
  const int64_t row_tiles = (n + kInt4TileRows - 1) / kInt4TileRows, part_row_tiles = (n_part + kInt4TileRows - 1) / kInt4TileRows;
  LW_CHECK(tiles && part && k > 0 && n_part > 0 && row_tile0 >= 0 && row_tile0 + part_row_tiles <= row_tiles,
           "int4_place_tiles: a part of " << n_part << " rows at row tile " << row_tile0 << " of a matrix of " << n << " rows");
  // A part's last tile padded with zero rows is the matrix's last: elsewhere its padding would
  // stand in for the next part's rows.
  LW_CHECK(n_part % kInt4TileRows == 0 || row_tile0 * kInt4TileRows + n_part == n,
           "int4_place_tiles: a part of " << n_part << " rows (not whole tiles) at row " << row_tile0 * kInt4TileRows
                                          << " does not end the matrix of " << n << " rows");
  const int64_t tiles_k = (k + kInt4TileCols - 1) / kInt4TileCols, words = part_row_tiles * tiles_k * kTileWords;
  gpu::launch("int4_place_tiles", place_kernel, {dim3(static_cast<unsigned>(grid_for(words))), dim3(kThreads), 0, stream},
              static_cast<uint32_t*>(tiles), row_tiles, static_cast<const uint32_t*>(part), part_row_tiles, row_tile0, tiles_k);
}

template <class T>
void int4_expand(T* out, const Int4Matrix& w, const int32_t* perm, int warp_size, cudaStream_t stream) {
  check_matrix("int4_expand", w);
  LW_CHECK(w.k < 0x7fffffff, "int4_expand: K = " << w.k << " exceeds 32-bit columns");
  const int64_t tiles_k = (w.k + kInt4TileCols - 1) / kInt4TileCols, tiles = int4_tile_count(w.n, w.k);
  // A warp per tile: kThreads / warp_size tiles per block.
  const int64_t warps = kThreads / warp_size, blocks = std::min<int64_t>((tiles + warps - 1) / warps, 65535);
  gpu::launch("int4_expand", expand_kernel<T>,
              {dim3(static_cast<unsigned>(blocks)), dim3(kThreads), static_cast<size_t>(warps * kExpandTileBytes), stream}, out,
              w, perm, tiles_k, tiles);
}

bool int4_gemm_supports(const Int4Matrix& w) { return w.group % 16 == 0 || w.group >= w.k; }

// Blocks of the fused kernel to aim for on each multiprocessor (its registers hold about four).
#ifndef LW_INT4_GEMM_BLOCKS_PER_SM
#define LW_INT4_GEMM_BLOCKS_PER_SM 4
#endif

namespace {
int64_t gemm_row_blocks(const Int4Matrix& w, int64_t m) {
  const int64_t row_tiles = (w.n + kInt4TileRows - 1) / kInt4TileRows;
  const int64_t x_tiles = (m + kInt4TileRows - 1) / kInt4TileRows;  // the kernel's NT: 1, 2 or 4
  const int rows_per_block = kGemmWarps * (x_tiles <= 1 ? kRowTiles<1> : x_tiles == 2 ? kRowTiles<2> : kRowTiles<4>);
  return (row_tiles + rows_per_block - 1) / rows_per_block;
}
}  // namespace

int int4_gemm_splits(const Int4Matrix& w, int multiprocessors, int64_t matrices) {
  // The blocks of one row of x run in waves of the device's resident blocks, each as long as its
  // split's steps plus a block's fixed cost (the ring's first entries, the group parameters, the
  // epilogue: about four steps): the splits with the fewest such steps over all waves, the
  // fewest splits among equals, each with at least four steps. A wave one block too many
  // doubles the time (28672 x 4096 took 3 splits, 1.27 waves, where 2 fill 0.85 of one). The
  // same for every m, so that a row's sums are added in one order whatever the batch.
  const int64_t tiles_k = (w.k + kInt4TileCols - 1) / kInt4TileCols;
  const int64_t slots = int64_t{LW_INT4_GEMM_BLOCKS_PER_SM} * std::max(multiprocessors, 1);
  const int64_t blocks = gemm_row_blocks(w, 1) * std::max<int64_t>(matrices, 1);
  constexpr int64_t kMostSplits = 64;  // lint: not-a-warp (a bound on the workspace)
  constexpr int64_t kBlockCost = 4;    // steps
  const int64_t most = std::min<int64_t>(std::max<int64_t>(1, tiles_k / 4), kMostSplits);
  int64_t best = 1, best_cost = -1;
  for (int64_t s = 1; s <= most; ++s) {
    // No split without steps: as many as ceil(tiles_k / s) steps each need.
    const int64_t per_split = (tiles_k + s - 1) / s, splits = (tiles_k + per_split - 1) / per_split;
    const int64_t waves = (blocks * splits + slots - 1) / slots, cost = waves * (per_split + kBlockCost);
    if (best_cost < 0 || cost < best_cost) {
      best = splits;
      best_cost = cost;
    }
  }
  return static_cast<int>(best);
}

int64_t int4_gemm_counters(const Int4Matrix& w, int64_t m) { return gemm_row_blocks(w, m); }

namespace {
// The streamed kernel's shared memory: x's rows over one split's columns, and 8 zeros.
size_t gemv_shared_bytes(const Int4Matrix& w, int64_t m, int splits, size_t element) {
  const int64_t tiles_k = (w.k + kInt4TileCols - 1) / kInt4TileCols, per_split = (tiles_k + splits - 1) / splits;
  return static_cast<size_t>(m * (per_split * kInt4TileCols + 8) + 8) * element;
}
// ... and with its sums added in a cluster: theirs after x's rows, on a 16-byte boundary.
size_t gemv_cluster_shared_bytes(const Int4Matrix& w, int64_t m, int splits, size_t element) {
  constexpr int64_t kBlockRows = kGemmWarps * kRowTiles<1> * kInt4TileRows;
  return (gemv_shared_bytes(w, m, splits, element) + 15) / 16 * 16 + static_cast<size_t>(m * kBlockRows) * sizeof(float);
}
}  // namespace

bool int4_gemv_serves(const Int4Matrix& w, int64_t m, int splits) {
  const int64_t group_cols = std::min(w.group, w.k);
  return m >= 1 && m <= gpu::mma::kNarrowCols && (group_cols % kInt4TileCols == 0 || group_cols >= w.k) && splits >= 1 &&
         gemv_shared_bytes(w, m, splits, 2) <= static_cast<size_t>(kSharedLimit);
}

template <class T>
void int4_gemm(T* y, const T* x, const Int4Matrix& w, const T* bias, int64_t m, int64_t ldx, int64_t ldy, int splits,
               float* workspace, int32_t* counters, int warp_size, cudaStream_t stream, Int4GemmKernel kernel,
               const int32_t* x_perm, Int4Gate gate) {
  check_matrix("int4_gemm", w);
  const bool hopper = kernel == Int4GemmKernel::hopper;
  LW_CHECK(m >= 0 && (m <= kInt4GemmMaxRows || hopper), "int4_gemm: " << m << " rows; at most " << kInt4GemmMaxRows);
  LW_CHECK(int4_gemm_supports(w), "int4_gemm: groups of " << w.group << " columns are not whole 16-column steps");
  LW_CHECK(w.k % 8 == 0 && ldx % 2 == 0 && gpu::aligned_to(4, x),
           "int4_gemm: K = " << w.k << " must be a multiple of 8 and x's rows 4-byte aligned (ldx " << ldx << ")");
  LW_CHECK(splits >= 1 && (splits == 1 || workspace), "int4_gemm: " << splits << " splits need a workspace");
  if (m == 0) return;
  LW_CHECK(kernel != Int4GemmKernel::streamed || int4_gemv_serves(w, m, splits),
           "int4_gemm: the streamed kernel does not serve " << m << " rows of x with groups of " << w.group << " columns of K = "
                                                            << w.k << " in " << splits << " splits");
  const bool streamed_may_serve = kernel != Int4GemmKernel::ring && !hopper;
  LW_CHECK(!x_perm || (streamed_may_serve && int4_gemv_serves(w, m, splits)),
           "int4_gemm: a column permutation of x is taken by the streamed kernel only, which does not serve "
               << m << " rows of x with groups of " << w.group << " columns of K = " << w.k << " in " << splits
               << " splits" << (streamed_may_serve ? "" : hopper ? " (the hopper kernel was asked for)" : " (the ring kernel was asked for)")
               << ": gather x's columns first (gather_columns)");
  LW_CHECK(!gate.on || (streamed_may_serve && int4_gemv_serves(w, m, splits)),
           "int4_gemm: a gated x is taken by the streamed kernel only, which does not serve "
               << m << " rows of x with groups of " << w.group << " columns of K = " << w.k << " in " << splits
               << " splits" << (streamed_may_serve ? "" : hopper ? " (the hopper kernel was asked for)" : " (the ring kernel was asked for)")
               << ": act_mul first");
  LW_CHECK(!gate.on || ldx >= 2 * w.k, "int4_gemm: a gated x needs rows of gate and up, 2 x " << w.k << " elements; ldx is " << ldx);
  const int64_t tiles_k = (w.k + kInt4TileCols - 1) / kInt4TileCols;
  const int64_t per_split = (tiles_k + splits - 1) / splits;
  // The kernel counts rows, columns, tiles and (row, group) parameters in 32 bits.
  const int64_t groups = (w.k + w.group - 1) / w.group;
  LW_CHECK(w.n < (int64_t{1} << 30) && w.k < kMostColumns && w.n * groups < (int64_t{1} << 31) && ldx < (int64_t{1} << 31),
           "int4_gemm: a matrix of [" << w.n << ", " << w.k << "] (ldx " << ldx << ") exceeds 32-bit indices");
  if (hopper) {
#if defined(LW_HOPPER_INT4)
    LW_CHECK(int4_hopper_serves(w), "int4_gemm: the hopper kernel does not serve groups of " << w.group << " columns of K = " << w.k
                                                                                           << " (whole 64-column tiles, or one group)");
    int4_hopper_gemm<T>(y, x, w, bias, m, ldx, ldy, splits, workspace, stream);
    if (splits > 1) {
      gpu::launch("int4_reduce_splits", reduce_splits_kernel<T>,
                  {dim3(static_cast<unsigned>(grid_for(m * w.n))), dim3(kThreads), 0, stream, gpu::kOverlapsPrior}, y, workspace, bias, m,
                  w.n, ldy, splits);
    }
    return;
#else
    LW_FAIL("int4_gemm: this build has no hopper kernel (its CUDA architectures name no 90)");
#endif
  }
  // 16-byte copies of x where its rows allow them, else 4-byte ones.
  const bool x_vectors = ldx % 8 == 0 && gpu::aligned_to(16, x);
  auto run = [&]<int NT, bool kNarrow>() {
    const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(gemm_row_blocks(w, m)), static_cast<unsigned>(splits)),
                                dim3(kGemmWarps * warp_size), sizeof(uint32_t) * kStages<NT> * kEntryWords<NT>, stream,
                                gpu::kOverlapsPrior};
    gpu::launch("int4_gemm", gemm_kernel<T, NT, kNarrow>, cfg, y, x, w, bias, static_cast<int>(m), static_cast<int>(ldx), ldy,
                static_cast<int>(per_split), x_vectors, workspace, counters);
  };
  if (kernel != Int4GemmKernel::ring && int4_gemv_serves(w, m, splits)) {
    gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(gemm_row_blocks(w, m)), static_cast<unsigned>(splits)),
                          dim3(kGemmWarps * warp_size), gemv_shared_bytes(w, m, splits, sizeof(T)), stream, gpu::kOverlapsPrior};
    // Where the splits would be added by their last block, a cluster of them adds them instead
    // where the device has clusters of that many blocks (their sums through shared memory).
    bool cluster_sums = false;
#if defined(LW_TARGET_CUDA)
    if (counters && splits > 1) {
      gpu::LaunchConfig in_cluster = cfg;
      in_cluster.shared_bytes = gemv_cluster_shared_bytes(w, m, splits, sizeof(T));
      gpu::allow_dynamic_shared(gemv_kernel<T>, in_cluster.shared_bytes);
      if (splits <= gpu::most_cluster_blocks(reinterpret_cast<const void*>(gemv_kernel<T>), in_cluster)) {
        cfg = in_cluster;
        cfg.cluster_y = static_cast<unsigned>(splits);
        cluster_sums = true;
      }
    }
#endif
    gpu::launch("int4_gemv", gemv_kernel<T>, cfg, y, x, w, bias, static_cast<int>(m), static_cast<int>(ldx), ldy,
                static_cast<int>(per_split), x_vectors, x_perm, gate, workspace, counters, cluster_sums);
  } else if (m <= gpu::mma::kNarrowCols) {
    // Up to kNarrowCols rows: products of the MMA's first columns only (the same sums per row).
    run.template operator()<1, true>();
  } else {
    switch ((m + 15) / 16) {
      case 1: run.template operator()<1, false>(); break;
      case 2: run.template operator()<2, false>(); break;
      default: run.template operator()<4, false>(); break;
    }
  }
  if (splits > 1 && counters == nullptr) {
    gpu::launch("int4_reduce_splits", reduce_splits_kernel<T>,
                {dim3(static_cast<unsigned>(grid_for(m * w.n))), dim3(kThreads), 0, stream, gpu::kOverlapsPrior}, y, workspace, bias, m, w.n, ldy,
                splits);
  }
}

bool int4_grouped_gemv_serves(const Int4Matrix& w, int splits) { return int4_gemv_serves(w, gpu::mma::kNarrowCols, splits); }

template <class T>
void int4_grouped_gemv(T* y, const T* x, const Int4Matrix& shape, const Int4Matrix* experts, int64_t count,
                       const int32_t* offsets, int64_t rows, int splits, float* workspace, int warp_size, cudaStream_t stream) {
  const char* op = "int4_grouped_gemv";
  check_matrix(op, shape);
  LW_CHECK(experts && offsets && count > 0 && count <= 65535,
           op << ": " << count << " experts (1 to 65535, with their matrices and offsets on the device)");
  LW_CHECK(rows >= 0 && rows < (int64_t{1} << 31) && shape.n * rows < (int64_t{1} << 40),
           op << ": " << rows << " rows of x exceed the kernel's indices");
  LW_CHECK(int4_grouped_gemv_serves(shape, splits),
           op << ": the streamed kernel does not serve groups of " << shape.group << " columns of K = " << shape.k << " in "
              << splits << " splits");
  LW_CHECK(splits == 1 || workspace, op << ": " << splits << " splits need a workspace");
  LW_CHECK(gpu::aligned_to(4, x), op << ": x must be 4-byte aligned");
  const int64_t groups = (shape.k + shape.group - 1) / shape.group;
  LW_CHECK(shape.n < (int64_t{1} << 30) && shape.k < kMostColumns && shape.n * groups < (int64_t{1} << 31),
           op << ": a matrix of [" << shape.n << ", " << shape.k << "] exceeds 32-bit indices");
  if (rows == 0) return;
  const int64_t tiles_k = (shape.k + kInt4TileCols - 1) / kInt4TileCols, per_split = (tiles_k + splits - 1) / splits;
  const bool x_vectors = shape.k % 8 == 0 && gpu::aligned_to(16, x);
  // By row where there are few rows for the experts (a decode step of few tokens among many
  // experts): a block per pass that exists, not one per expert. On the H200 (Qwen3-30B-A3B's 128
  // experts) 24-27% faster at 8 rows, within 2% at 32, 9% slower at 64: up to a quarter.
  const bool by_row = 4 * rows <= count;
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(gemm_row_blocks(shape, 1)), static_cast<unsigned>(splits),
                                   static_cast<unsigned>(by_row ? rows : count)),
                              dim3(kGemmWarps * warp_size), gemv_shared_bytes(shape, gpu::mma::kNarrowCols, splits, sizeof(T)),
                              stream, gpu::kOverlapsPrior};
  auto run = [&](auto kernel) {
    gpu::launch("int4_grouped_gemv", kernel, cfg, y, x, experts, offsets, static_cast<int>(count), static_cast<int>(rows),
                static_cast<int>(shape.k), shape.n, static_cast<int>(per_split), x_vectors, workspace);
  };
  if (by_row) run(grouped_gemv_kernel<T, true>);
  else run(grouped_gemv_kernel<T, false>);
  if (splits > 1)
    gpu::launch("int4_reduce_splits", reduce_splits_kernel<T>,
                {dim3(static_cast<unsigned>(grid_for(rows * shape.n))), dim3(kThreads), 0, stream, gpu::kOverlapsPrior}, y,
                workspace, static_cast<const T*>(nullptr), rows, shape.n, shape.n, splits);
}

template <class T>
void gather_columns(T* out, const T* x, const int32_t* perm, int64_t rows, int64_t k, int64_t ldx, cudaStream_t stream) {
  if (rows == 0 || k == 0) return;
  gpu::launch("gather_columns", gather_columns_kernel<T>,
              {dim3(static_cast<unsigned>(grid_for(rows * k))), dim3(kThreads), 0, stream}, out, x, perm, rows, k, ldx);
}

#define LW_INT4_INSTANTIATE(T)                                                                                          \
  template void int4_expand<T>(T*, const Int4Matrix&, const int32_t*, int, cudaStream_t);                                    \
  template void gather_columns<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t, cudaStream_t);
LW_INT4_INSTANTIATE(float)
LW_INT4_INSTANTIATE(half)
LW_INT4_INSTANTIATE(bfloat16)
#undef LW_INT4_INSTANTIATE
template void int4_gemm<half>(half*, const half*, const Int4Matrix&, const half*, int64_t, int64_t, int64_t, int, float*,
                              int32_t*, int, cudaStream_t, Int4GemmKernel, const int32_t*, Int4Gate);
template void int4_gemm<bfloat16>(bfloat16*, const bfloat16*, const Int4Matrix&, const bfloat16*, int64_t, int64_t,
                                  int64_t, int, float*, int32_t*, int, cudaStream_t, Int4GemmKernel, const int32_t*, Int4Gate);
template void int4_grouped_gemv<half>(half*, const half*, const Int4Matrix&, const Int4Matrix*, int64_t, const int32_t*,
                                      int64_t, int, float*, int, cudaStream_t);
template void int4_grouped_gemv<bfloat16>(bfloat16*, const bfloat16*, const Int4Matrix&, const Int4Matrix*, int64_t,
                                          const int32_t*, int64_t, int, float*, int, cudaStream_t);

}  // namespace lw::kernels
