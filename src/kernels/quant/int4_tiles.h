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

// Fragment elements i and i + 1 from the word holding them (nibbles p and p + 4) minus the zero
// point: zbias holds (magic + zero) in both 16-bit halves.
template <class T>
LW_DEVICE_INLINE void decode_pair(uint32_t word, int p, uint32_t zbias, T& lo, T& hi) {
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // (shifted & mask) | magic in one instruction (lookup table 0xea: (a & b) | c).
  uint32_t bits;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(bits) : "r"(word >> (4 * p)), "n"(0x000f000f), "n"(kMagic<T> * 0x10001u));
  using Pair = std::conditional_t<std::is_same_v<T, half>, __half2, __nv_bfloat162>;
  Pair v, z;
  memcpy(&v, &bits, 4);
  memcpy(&z, &zbias, 4);
  const Pair r = __hsub2(v, z);
  lo = r.x;
  hi = r.y;
#else
  const uint32_t bits = ((word >> (4 * p)) & 0x000f000fu) | (kMagic<T> * 0x10001u);
  const float z = static_cast<float>(static_cast<int>(zbias & 0xffffu) - static_cast<int>(kMagic<T>));
  lo = gpu::from_float<T>(static_cast<float>(bits & 15u) - z);
  hi = gpu::from_float<T>(static_cast<float>((bits >> 16) & 15u) - z);
#endif
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


}  // namespace lw::kernels::int4_tiles
