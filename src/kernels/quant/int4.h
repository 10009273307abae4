// 4-bit weights with a scale and a zero point per (output row, group of input columns), the
// form GPTQ, AWQ and compressed-tensors checkpoints share:
//   w[n, k] = (q[n, k] - zero[n, g]) * scale[n, g],  g = k / group,  q and zero in 0..16.
//
// On the device the values are kept in tiles of 16 rows x 64 columns (512 bytes), each laid out
// for the matrix-fragment layer of the code's target (gpu/matrix_fragment.h): a lane's A
// fragments of the tile's four 16x16x16 steps are one run of bytes (16 on NVIDIA, 8 on MFMA,
// 32 on WMMA), and within each 32-bit word fragment elements 2p and 2p + 1 sit in nibbles p and
// p + 4, so one mask yields them as a pair of 16-bit lanes. The tiles are made on the device by
// int4_pack_tiles, compiled for the same target as the kernels that read them: the layout is
// the device's, never assumed by the host.
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "kernels/activation.h"

namespace lw::kernels {

inline constexpr int64_t kInt4TileRows = 16;
inline constexpr int64_t kInt4TileCols = 64;  // lint: not-a-warp (four 16-column fragment steps)
inline constexpr int64_t kInt4TileBytes = kInt4TileRows * kInt4TileCols / 2;
// The fused kernel serves up to this many rows of x; more expand the weights (ops::linear).
inline constexpr int64_t kInt4GemmMaxRows = 64;  // lint: not-a-warp (four 16-row fragment tiles of x)

struct Int4Matrix {
  const void* tiles = nullptr;      // ceil(n / 16) x ceil(k / 64) tiles (in the kernels' order)
  const float* scales = nullptr;    // [n, groups]
  const uint8_t* zeros = nullptr;   // [n, groups]
  int64_t n = 0, k = 0, group = 0;  // groups = ceil(k / group)
};

inline int64_t int4_tile_count(int64_t n, int64_t k) {
  return ((n + kInt4TileRows - 1) / kInt4TileRows) * ((k + kInt4TileCols - 1) / kInt4TileCols);
}

// Where the 4-bit values of a checkpoint's int32 words are: out[i, j] (rows x cols bytes, one
// value per byte) = the value of word (r / row_div) * row_stride + (c / col_div) * col_stride at
// nibble order[(pack_cols ? c : r) % 8], plus `add`, with r = row0 + i and c = col_perm[col0 + j]
// (or col0 + j): a part of the stored matrix.
struct Int4Unpack {
  int64_t rows = 0, cols = 0;
  int64_t row0 = 0, col0 = 0;
  int row_div = 1, col_div = 1;  // 1 or 8
  int64_t row_stride = 0, col_stride = 0;
  bool pack_cols = true;  // eight consecutive columns (else rows) share a word
  uint8_t order[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  int add = 0;
  const int32_t* col_perm = nullptr;  // [cols], or null
  int64_t words = 0;                  // int32 words of the source (every index is checked against it)
};
void int4_unpack(uint8_t* out, const int32_t* src, const Int4Unpack& u, cudaStream_t stream);

// The tiles of q [n, k] (one value 0..15 per byte, row-major); rows and columns past the matrix
// hold 0.
void int4_pack_tiles(void* tiles, const uint8_t* q, int64_t n, int64_t k, cudaStream_t stream);

// The tiles of `part` (n_part rows) written as row tiles row_tile0.. of `tiles` (n rows): how
// parts whose rows are whole tiles are stacked (the order of tiles in memory is the kernels').
void int4_place_tiles(void* tiles, int64_t n, const void* part, int64_t n_part, int64_t row_tile0, int64_t k,
                      cudaStream_t stream);

// out [n, k] row-major: every weight in fp32 rounded once to T. perm (optional, [k]): the tiles'
// column j is the matrix's column perm[j] (act-order checkpoints).
template <class T>
void int4_expand(T* out, const Int4Matrix& w, const int32_t* perm, int warp_size, cudaStream_t stream);

// The gated product the streamed kernel can multiply in x's place: each row of x holds 2k
// elements, gate then up, and the kernel stages act(gate[j]) * up[j] rounded once to T, as
// act_mul writes it (an MLP's down projection without act_mul's launch and round trip).
struct Int4Gate {
  bool on = false;
  Activation act = Activation::silu;
};

// The kernels of int4_gemm. `ring` and `streamed` give the same bits wherever both serve: `ring`
// stages the weight tiles and x through a ring of shared memory (every m); `streamed` loads each
// lane's runs of the tiles straight into registers and x's columns once per block (few rows of
// x: int4_gemv_serves). `automatic` takes `streamed` where it serves. `hopper` is the same
// arithmetic on NVIDIA Hopper's warpgroup multiply (kernels/quant/int4_hopper.h: sm_90 devices,
// builds for 90; any m; groups of whole 64-column tiles), only where asked for.
enum class Int4GemmKernel { automatic, ring, streamed, hopper };

// y[m, n] = x[m, k] @ W^T (+ bias) on the matrix-fragment layer, m <= kInt4GemmMaxRows (any m on
// the hopper kernel, whose splits are always added by a second launch): the
// zero points are subtracted exactly in T (integers), each group's products accumulate in fp32
// and are multiplied by their scales there. x rows ldx elements apart (even, 4-byte aligned),
// y rows ldy. `splits` > 1 divides k over that many blocks per row tile, whose fp32 partial sums
// go to `workspace` ([splits, m, n] floats) and are added in split order by the last of a row
// block's splits to finish (`counters`: int4_gemm_counters zeroed ints, left zero) or, without
// counters, by a second launch (the same sums): the result does not depend on m or on other rows
// of x. Needs matrix cores (int4_gemm_available). x_perm (optional, [k], act-order weights): the
// tiles' column j multiplies x's column x_perm[j], gathered as the streamed kernel stages x (no
// gathered copy of x, no launch for it); only where the streamed kernel serves (refused
// otherwise: gather_columns first). gate (streamed kernel only, like x_perm): x's rows are
// gate/up pairs of 2k elements (ldx >= 2k), multiplied as their gated product.
template <class T>
void int4_gemm(T* y, const T* x, const Int4Matrix& w, const T* bias, int64_t m, int64_t ldx, int64_t ldy, int splits,
               float* workspace, int32_t* counters, int warp_size, cudaStream_t stream,
               Int4GemmKernel kernel = Int4GemmKernel::automatic, const int32_t* x_perm = nullptr, Int4Gate gate = {});
// Whether the streamed kernel serves m rows of x in `splits` k splits: up to 8 rows (the MMA's
// narrow products), groups of whole 64-column tiles (or one group), x's columns of a split in
// 48 KiB of shared memory.
bool int4_gemv_serves(const Int4Matrix& w, int64_t m, int splits);
// How many k splits suit the device (`multiprocessors` of it), the same for any rows of x: the
// fewest waves of blocks for the longest split at one row of x in each of `matrices` launched
// together (int4_grouped_gemv's experts with rows).
int int4_gemm_splits(const Int4Matrix& w, int multiprocessors, int64_t matrices = 1);
// The counters int4_gemm takes for m rows of x (one per block of row tiles).
int64_t int4_gemm_counters(const Int4Matrix& w, int64_t m);
// Whether int4_gemm reads this matrix: groups of whole 16-column steps (or one group).
bool int4_gemm_supports(const Int4Matrix& w);

// y[rows, n] = x[rows, k] through one 4-bit matrix per expert (MoE), in one launch of the streamed
// kernel: rows [offsets[e], offsets[e + 1]) of x times experts[e], up to 8 rows a pass (an
// expert's tiles are read once per pass), with the offsets read on the device (no host
// synchronisation). `experts` (device memory, `count` entries) share `shape`'s n, k and group
// and have their columns in order; x and y are contiguous (k and n apart). `splits` > 1 (see
// int4_gemm_splits) writes partial sums to `workspace` ([splits, rows, n] floats), added by a
// second launch. The offsets run from 0 to `rows` without decreasing (an expert's that do not
// are skipped).
template <class T>
void int4_grouped_gemv(T* y, const T* x, const Int4Matrix& shape, const Int4Matrix* experts, int64_t count,
                       const int32_t* offsets, int64_t rows, int splits, float* workspace, int warp_size, cudaStream_t stream);
// Whether int4_grouped_gemv serves matrices of this shape in `splits` splits.
bool int4_grouped_gemv_serves(const Int4Matrix& shape, int splits);

// out[r, j] = x[r, perm[j]] (rows ldx apart in, k apart out).
template <class T>
void gather_columns(T* out, const T* x, const int32_t* perm, int64_t rows, int64_t k, int64_t ldx, cudaStream_t stream);

}  // namespace lw::kernels
