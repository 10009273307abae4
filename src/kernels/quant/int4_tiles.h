// The device side of the 4-bit tiles (kernels/quant/int4.h) that every kernel reading them
// shares: where a tile and a lane's run of it lie in memory, how a run is loaded, and how a
// pair of its values is decoded into fragment elements. Included by kernel (.cu) files only.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gpu/compat.h"
#include "gpu/matrix_fragment.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "kernels/quant/int4.h"

namespace lw::kernels::int4_tiles {

namespace mma = gpu::mma;

// Lanes holding distinct A data (RDNA3's WMMA repeats lanes 0..15 in 16..31), the bytes and
// 32-bit words each holds per tile (four steps of kA elements at half a byte each).
constexpr int kDataLanes = 256 / mma::kA;
constexpr int kLaneBytes = 2 * mma::kA;
constexpr int kLaneWords = kLaneBytes / 4;
constexpr int kSteps = kInt4TileCols / 16;
constexpr int kTileWords = static_cast<int>(kInt4TileBytes / 4);
static_assert(kDataLanes * kLaneBytes == kInt4TileBytes, "a tile is every data lane's run");

// The tiles' order in memory: bands of kBand row tiles (the last band of a matrix may have
// fewer), each band's tiles 64-column step by step, the band's row tiles side by side within a
// step. The fused kernels' blocks cover whole bands (kGemmWarps x kRowTiles row tiles: one band
// up to 16 rows of x and at 33-64, two at 17-32), so what a block reads at one step is one run of
// bytes a band, and its split one range a band: the warps resident together read neighbouring
// bytes rather than kBand streams a tile row apart (the streamed kernel 0-2.5% faster at one row
// than over row-major tiles on the H200;
// docs/PERFORMANCE.md).
#ifndef LW_INT4_TILE_BAND
#define LW_INT4_TILE_BAND 8
#endif
constexpr int kBand = LW_INT4_TILE_BAND;
static_assert(kBand >= 1, "a band holds a row tile");
// The fused kernels step through a band in 32-bit word offsets.
constexpr int64_t kMostColumns = (int64_t{1} << 31) / (kBand * kTileWords) * kInt4TileCols;
// Tile (row tile t, step s)'s index; its steps are `band_width(t)` tiles apart.
LW_HOST_DEVICE inline int64_t band_width(int64_t t, int64_t row_tiles) {
  const int64_t b0 = t / kBand * kBand;
  return row_tiles - b0 < kBand ? row_tiles - b0 : kBand;
}
LW_HOST_DEVICE inline int64_t tile_index(int64_t t, int64_t s, int64_t row_tiles, int64_t tiles_k) {
  const int64_t b0 = t / kBand * kBand;
  return b0 * tiles_k + s * band_width(t, row_tiles) + (t - b0);
}
// The row tile and step of the tile at index i (tile_index's inverse).
LW_HOST_DEVICE inline void tile_place(int64_t i, int64_t row_tiles, int64_t tiles_k, int64_t& t, int64_t& s) {
  const int64_t b0 = i / (kBand * tiles_k) * kBand, width = band_width(b0, row_tiles), o = i - b0 * tiles_k;
  s = o / width;
  t = b0 + (o - s * width);
}

// Element e (0 .. 4 kA - 1) of a lane's run: word e / 8, nibble (e % 8) / 2 + 4 ((e % 8) odd).
LW_DEVICE_INLINE constexpr int nibble_of(int e) { return ((e & 7) >> 1) + 4 * (e & 1); }

// 1024 + q (f16) or 128 + q (bf16) for a nibble q in the low bits: exact, and one subtraction of
// (magic + zero) leaves q - zero exactly.
template <class T>
constexpr uint32_t kMagic = std::is_same_v<T, half> ? 0x6400u : 0x4300u;

// The two 16-bit halves of `bits`, each (magic + v) for a small integer v, less zbias's halves
// ((magic + zero) each) as a pair of T: v - zero exactly.
template <class T>
LW_DEVICE_INLINE void unbias_pair(uint32_t bits, uint32_t zbias, T& lo, T& hi) {
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using Pair = std::conditional_t<std::is_same_v<T, half>, __half2, __nv_bfloat162>;
  Pair v, z;
  memcpy(&v, &bits, 4);
  memcpy(&z, &zbias, 4);
  const Pair r = __hsub2(v, z);
  lo = r.x;
  hi = r.y;
#else
  const float z = static_cast<float>(static_cast<int>(zbias & 0xffffu) - static_cast<int>(kMagic<T>));
  lo = gpu::from_float<T>(static_cast<float>(static_cast<int>(bits & 0xffffu) - static_cast<int>(kMagic<T>)) - z);
  hi = gpu::from_float<T>(static_cast<float>(static_cast<int>(bits >> 16) - static_cast<int>(kMagic<T>)) - z);
#endif
}

// Fragment elements i and i + 1 from the word holding them (nibbles p and p + 4) minus the zero
// point: zbias holds (magic + zero) in both 16-bit halves.
template <class T>
LW_DEVICE_INLINE void decode_pair(uint32_t word, int p, uint32_t zbias, T& lo, T& hi) {
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // (shifted & mask) | magic in one instruction (lookup table 0xea: (a & b) | c).
  uint32_t bits;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(bits) : "r"(word >> (4 * p)), "n"(0x000f000f), "n"(kMagic<T> * 0x10001u));
#else
  const uint32_t bits = ((word >> (4 * p)) & 0x000f000fu) | (kMagic<T> * 0x10001u);
#endif
  unbias_pair<T>(bits, zbias, lo, hi);
}

// A lane's run of a weight tile, read once and not kept in L1 (NVIDIA: ld.global.nc with
// L1::no_allocate): V words, V <= 4.
template <int V>
LW_DEVICE_INLINE gpu::Vec<uint32_t, V> load_run(const uint32_t* p) {
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  gpu::Vec<uint32_t, V> v;
  if constexpr (V == 4) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.v[0]), "=r"(v.v[1]), "=r"(v.v[2]), "=r"(v.v[3])
                 : "l"(p));
  } else if constexpr (V == 2) {
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.v[0]), "=r"(v.v[1]) : "l"(p));
  } else {
    v = gpu::load_vec<V>(p);
  }
  return v;
#else
  return gpu::load_vec<V>(p);
#endif
}


// A warp's group parameters over R row tiles (first rows row0[r]) where groups are whole tiles
// or one group: the current group's scales (one per row slot of C) and zero points (one per row
// slot of A), the next group's loaded as soon as the one before takes over; rows past the matrix
// read its last row. The zero points become decode biases (`zbias`) only in take_zeros, so that
// no instruction waits for their loads before the kernel calls it. Usage: construct (loads the
// split's first two groups), take_zeros() where the first group's biases are needed, and at
// each tile `if (begins_at(tile_col)) { fold with scale; advance(); }`. The Hopper kernel uses
// it; the streamed kernel (int4.cu) keeps the same steps in place, where the struct measured
// slower.
template <class T, int R>
struct GroupParams {
  struct Set {
    float scale[R][mma::kRowSlots];
    uint32_t zero[R][mma::kARowSlots];
  };
  const float* scales;
  const uint8_t* zeros;
  int slot_at[R][mma::kRowSlots], a_slot_at[R][mma::kARowSlots];
  int group, next_group_at, group_cols, split_end;
  Set now, next;
  uint32_t zbias[R][mma::kARowSlots];  // (magic + zero) in both 16-bit halves, for decode_pair

  // The split's tiles [first, last) of a matrix of n rows, K = k and `groups` groups of
  // `group_cols` columns.
  LW_DEVICE_INLINE GroupParams(const Int4Matrix& w, const int (&row0)[R], int lane, int n, int k, int groups, int cols,
                               int first, int last)
      : scales(w.scales), zeros(w.zeros), group_cols(cols) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int sl = 0; sl < mma::kRowSlots; ++sl) slot_at[r][sl] = min(row0[r] + mma::slot_row(lane, sl), n - 1) * groups;
#pragma unroll
      for (int sl = 0; sl < mma::kARowSlots; ++sl) a_slot_at[r][sl] = min(row0[r] + mma::a_slot_row(lane, sl), n - 1) * groups;
    }
    split_end = min(last * static_cast<int>(kInt4TileCols), k);
    group = first * static_cast<int>(kInt4TileCols) / group_cols;
    next_group_at = (group + 1) * group_cols;
    if (first < last) load(group, now);
    if (next_group_at < split_end) load(group + 1, next);
  }
  LW_DEVICE_INLINE void load(int g, Set& to) const {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int sl = 0; sl < mma::kRowSlots; ++sl) to.scale[r][sl] = scales[slot_at[r][sl] + g];
#pragma unroll
      for (int sl = 0; sl < mma::kARowSlots; ++sl) to.zero[r][sl] = zeros[a_slot_at[r][sl] + g];
    }
  }
  LW_DEVICE_INLINE void take_zeros() {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int sl = 0; sl < mma::kARowSlots; ++sl) zbias[r][sl] = (kMagic<T> + now.zero[r][sl]) * 0x10001u;
  }
  // Whether a new group begins with the tile at column tile_col (the caller folds the group
  // before it with now.scale, then calls advance()).
  LW_DEVICE_INLINE bool begins_at(int tile_col) const { return tile_col >= next_group_at; }
  LW_DEVICE_INLINE void advance() {
    ++group;
    next_group_at += group_cols;
    now = next;
    take_zeros();
    if (next_group_at < split_end) load(group + 1, next);
  }
};

}  // namespace lw::kernels::int4_tiles
