#include "kernels/quant/int4.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "base/error.h"
#include "gpu/launch.h"
#include "gpu/matrix_fragment.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"

namespace lw::kernels {

namespace {

namespace mma = gpu::mma;

// Lanes holding distinct A data (RDNA3's WMMA repeats lanes 0..15 in 16..31), the bytes and
// 32-bit words each holds per tile (four steps of kA elements at half a byte each).
constexpr int kDataLanes = 256 / mma::kA;
constexpr int kLaneBytes = 2 * mma::kA;
constexpr int kLaneWords = kLaneBytes / 4;
constexpr int kSteps = kInt4TileCols / 16;
constexpr int kTileWords = static_cast<int>(kInt4TileBytes / 4);
static_assert(kDataLanes * kLaneBytes == kInt4TileBytes, "a tile is every data lane's run");

// Element e (0 .. 4 kA - 1) of a lane's run: word e / 8, nibble (e % 8) / 2 + 4 ((e % 8) odd).
LW_DEVICE_INLINE constexpr int nibble_of(int e) { return ((e & 7) >> 1) + 4 * (e & 1); }

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
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < words; idx += stride) {
    const int64_t tile = idx / kTileWords;
    const int w = static_cast<int>(idx - tile * kTileWords);
    const int64_t row0 = (tile / tiles_k) * kInt4TileRows, col0 = (tile % tiles_k) * kInt4TileCols;
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

// A thread per word of the tiles; the two elements of a pair share a row (and so a scale and a
// zero point) and sit in adjacent columns: one store of both where the columns are in order.
template <class T>
__global__ void expand_kernel(T* out, Int4Matrix w, const int32_t* perm, int64_t tiles_k, int64_t words) {
  const auto* tiles = static_cast<const uint32_t*>(w.tiles);
  const int64_t groups = (w.k + w.group - 1) / w.group;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < words; idx += stride) {
    const int64_t tile = idx / kTileWords;
    const int wi = static_cast<int>(idx - tile * kTileWords);
    const int64_t row0 = (tile / tiles_k) * kInt4TileRows, col0 = (tile % tiles_k) * kInt4TileCols;
    const int lane = wi / kLaneWords;
    const uint32_t word = tiles[idx];
#pragma unroll
    for (int slot = 0; slot < 8; slot += 2) {
      const int e = (wi % kLaneWords) * 8 + slot, step = e / mma::kA, i = e % mma::kA;
      const int64_t r = row0 + mma::a_row(lane, i), c = col0 + 16 * step + mma::a_col(lane, i);
      if (r >= w.n || c >= w.k) continue;  // K is a multiple of 8: c + 1 < K too
      const int64_t g = r * groups + static_cast<int>(c) / static_cast<int>(w.group);
      const float s = w.scales[g], z = static_cast<float>(w.zeros[g]);
      gpu::Vec<T, 2> v;
      v.v[0] = gpu::from_float<T>((static_cast<float>((word >> (4 * nibble_of(slot))) & 15u) - z) * s);
      v.v[1] = gpu::from_float<T>((static_cast<float>((word >> (4 * nibble_of(slot + 1))) & 15u) - z) * s);
      if (perm) {
        out[r * w.k + perm[c]] = v.v[0];
        out[r * w.k + perm[c + 1]] = v.v[1];
      } else {
        gpu::store_vec<2>(out + r * w.k + c, v);
      }
    }
  }
}

// 1024 + q (f16) or 128 + q (bf16) for a nibble q in the low bits: exact, and one subtraction of
// (magic + zero) leaves q - zero exactly.
template <class T>
constexpr uint32_t kMagic = std::is_same_v<T, half> ? 0x6400u : 0x4300u;

// Fragment elements i and i + 1 from the word holding them (nibbles p and p + 4) minus the zero
// point: zbias holds (magic + zero) in both 16-bit halves.
template <class T>
LW_DEVICE_INLINE void decode_pair(uint32_t word, int p, uint32_t zbias, T& lo, T& hi) {
  const uint32_t bits = ((word >> (4 * p)) & 0x000f000fu) | (kMagic<T> * 0x10001u);
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
  lo = gpu::from_float<T>(static_cast<float>(bits & 15u) - z);
  hi = gpu::from_float<T>(static_cast<float>((bits >> 16) & 15u) - z);
#endif
}

constexpr int kGemmWarps = 4;
constexpr int kFragElems = 256;  // a 16 x 16 C tile: kC elements in each lane on every layout

// Row tiles of 16 weight rows a warp multiplies with each fragment of x it loads (fewer as x
// takes more tiles, so that the accumulators stay in registers), and the tiles of weights each
// warp has in flight beyond the one it multiplies. Measured on the H200 (docs/PERFORMANCE.md
// "4-bit weights"): 4 row tiles or 2 and 4 tiles ahead were slower at one and 16 rows of x
// than 2 row tiles and one ahead (more registers, fewer warps).
template <int NT>
constexpr int kRowTiles = NT <= 2 ? 2 : 1;
constexpr int kTilesAhead = 1;

// A block per kRowTiles x 16 weight rows and k split (blockIdx.y of gridDim.y); its warps take
// consecutive parts of the split's 64-column tiles. NT tiles of 16 rows of x (the MMA's N),
// each fragment of x loaded once per step and multiplied with every row tile's fragment. A
// warp's partial sums go through shared memory to warp 0, which adds them in warp order and
// writes y (one split) or the split's partial sums.
template <class T, int NT>
__global__ void gemm_kernel(T* y, const T* x, Int4Matrix w, const T* bias, int64_t m, int64_t ldx, int64_t ldy,
                            int64_t tiles_per_warp, float* workspace) {
  constexpr int R = kRowTiles<NT>, D = kTilesAhead;
  LW_SHARED(float, partial, [kGemmWarps * R * NT * kFragElems]);
#if LW_MATRIX_CORES
  const int warp = gpu::warp_id(), lane = gpu::lane_id();
  const int64_t tiles_k = (w.k + kInt4TileCols - 1) / kInt4TileCols, row_tiles = (w.n + kInt4TileRows - 1) / kInt4TileRows;
  const int64_t groups = (w.k + w.group - 1) / w.group;
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kGemmWarps + warp) * tiles_per_warp;
  const int64_t last = first + tiles_per_warp < tiles_k ? first + tiles_per_warp : tiles_k;
  // Row tiles past the matrix read the last one again (their results are not written).
  const uint8_t* tile_row[R];
  int64_t row0[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t t = static_cast<int64_t>(blockIdx.x) * R + r;
    row0[r] = t * kInt4TileRows;
    tile_row[r] = static_cast<const uint8_t*>(w.tiles) + (t < row_tiles ? t : row_tiles - 1) * tiles_k * kInt4TileBytes +
                  (lane % kDataLanes) * kLaneBytes;
  }
  auto clamp_row = [&](int r, int i) { return row0[r] + i < w.n ? row0[r] + i : w.n - 1; };
  auto load_words = [&](int64_t t, uint32_t (&words)[R][kLaneWords]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const auto* p = reinterpret_cast<const uint32_t*>(tile_row[r] + t * kInt4TileBytes);
#pragma unroll
      for (int c = 0; c < kLaneWords; c += 4) {
        const auto v = gpu::load_vec<(kLaneWords < 4 ? kLaneWords : 4)>(p + c);
#pragma unroll
        for (int e = 0; e < (kLaneWords < 4 ? kLaneWords : 4); ++e) words[r][c + e] = v.v[e];
      }
    }
  };
  // The rows of x behind each pair of this lane's B elements (null past m: zeros).
  const T* xrow[NT][mma::kB / 2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < mma::kB; i += 2) {
      const int64_t row = nt * 16 + mma::b_col(lane, i);
      xrow[nt][i / 2] = row < m ? x + row * ldx + mma::b_row(lane, i) : nullptr;
    }

  // This group's scales (one per row slot of C) and zero points (one per pair of A elements);
  // where groups are whole tiles, the next group's are loaded with the tile before it starts.
  float scale[R][mma::kRowSlots], next_scale[R][mma::kRowSlots];
  uint32_t zbias[R][mma::kA / 2], next_zbias[R][mma::kA / 2];
  auto load_group = [&](int64_t g, float (&s)[R][mma::kRowSlots], uint32_t (&z)[R][mma::kA / 2]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int sl = 0; sl < mma::kRowSlots; ++sl) s[r][sl] = w.scales[clamp_row(r, mma::slot_row(lane, sl)) * groups + g];
#pragma unroll
      for (int p = 0; p < mma::kA / 2; ++p)
        z[r][p] = (kMagic<T> + w.zeros[clamp_row(r, mma::a_row(lane, 2 * p)) * groups + g]) * 0x10001u;
    }
  };
  const bool ahead = w.group % kInt4TileCols == 0 || w.group >= w.k;

  mma::FragC total[R][NT], sums[R][NT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      mma::fill(total[r][nt], 0.0f);
      mma::fill(sums[r][nt], 0.0f);
    }
  // The current group and the column where the next begins (no division per step).
  int64_t group = first * kInt4TileCols / w.group, next_group_at = (group + 1) * w.group;
  if (first < last) load_group(group, scale, zbias);
  auto fold = [&]() {  // the group's sums times their rows' scales
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < mma::kC; ++i) {
        const float s = scale[r][mma::c_slot(i)];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          total[r][nt].x[i] += s * sums[r][nt].x[i];
          sums[r][nt].x[i] = 0.0f;
        }
      }
  };
  // A ring of D tiles in flight: tile t's slot is refilled with tile t + D as t is taken.
  uint32_t ring[D][R][kLaneWords];
#pragma unroll
  for (int d = 0; d < D; ++d)
    if (first + d < last) load_words(first + d, ring[d]);
  for (int64_t t0 = first; t0 < last; t0 += D)
#pragma unroll
  for (int d = 0; d < D; ++d) {
    const int64_t t = t0 + d;
    if (t >= last) break;
    uint32_t words[R][kLaneWords];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < kLaneWords; ++i) words[r][i] = ring[d][r][i];
    // Where groups are whole tiles they begin with a tile: the parameters loaded a tile ago
    // take over before the next group's are loaded into their place.
    if (ahead && t * kInt4TileCols >= next_group_at) {
      fold();
      ++group;
      next_group_at += w.group;
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int sl = 0; sl < mma::kRowSlots; ++sl) scale[r][sl] = next_scale[r][sl];
#pragma unroll
        for (int p = 0; p < mma::kA / 2; ++p) zbias[r][p] = next_zbias[r][p];
      }
    }
    if (t + D < last) load_words(t + D, ring[d]);
    if (ahead && t + 1 < last && (t + 1) * kInt4TileCols >= next_group_at) load_group(group + 1, next_scale, next_zbias);
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      const int64_t k0 = t * kInt4TileCols + 16 * step;
      if (k0 >= w.k) break;
      if (!ahead && k0 >= next_group_at) {  // a group that begins inside the tile
        fold();
        ++group;
        next_group_at += w.group;
        load_group(group, scale, zbias);
      }
      // This step's fragments of x (k even and K a multiple of 8: a pair never crosses K).
      mma::FragB<T> b[NT];
      const bool whole = k0 + 16 <= w.k;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < mma::kB; i += 2) {
          const T* p = xrow[nt][i / 2];
          uint32_t pair = 0;
          if (p && (whole || k0 + mma::b_row(lane, i) < w.k)) pair = *reinterpret_cast<const uint32_t*>(p + k0);
          b[nt].x[i] = __builtin_bit_cast(T, static_cast<uint16_t>(pair & 0xffffu));
          b[nt].x[i + 1] = __builtin_bit_cast(T, static_cast<uint16_t>(pair >> 16));
        }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        mma::FragA<T> a;
#pragma unroll
        for (int i = 0; i < mma::kA; i += 2) {
          const int e = step * mma::kA + i;
          decode_pair<T>(words[r][e >> 3], (e & 7) >> 1, zbias[r][i / 2], a.x[i], a.x[i + 1]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma::mma(sums[r][nt], a, b[nt], sums[r][nt]);
      }
    }
  }
  if (first < last) fold();
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < mma::kC; ++i)
        partial[((warp * R + r) * NT + nt) * kFragElems + lane * mma::kC + i] = total[r][nt].x[i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < mma::kC; ++i) {
        float v = 0.0f;
        for (int wp = 0; wp < kGemmWarps; ++wp) v += partial[((wp * R + r) * NT + nt) * kFragElems + lane * mma::kC + i];
        const int64_t row = row0[r] + mma::c_row(lane, i), tok = nt * 16 + mma::c_col(lane, i);
        if (row >= w.n || tok >= m) continue;
        if (gridDim.y == 1) {
          y[tok * ldy + row] = gpu::from_float<T>(v + (bias ? gpu::to_float(bias[row]) : 0.0f));
        } else {
          workspace[(static_cast<int64_t>(blockIdx.y) * m + tok) * w.n + row] = v;
        }
      }
#else
  (void)partial, (void)y, (void)x, (void)w, (void)bias, (void)m, (void)ldx, (void)ldy, (void)tiles_per_warp, (void)workspace;
#endif
}

// y = the splits' partial sums added in split order (+ bias).
template <class T>
__global__ void reduce_splits_kernel(T* y, const float* workspace, const T* bias, int64_t m, int64_t n, int64_t ldy,
                                     int splits) {
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

template <class T>
void int4_expand(T* out, const Int4Matrix& w, const int32_t* perm, cudaStream_t stream) {
  check_matrix("int4_expand", w);
  LW_CHECK(w.k < 0x7fffffff, "int4_expand: K = " << w.k << " exceeds 32-bit columns");
  const int64_t tiles_k = (w.k + kInt4TileCols - 1) / kInt4TileCols, words = int4_tile_count(w.n, w.k) * kTileWords;
  gpu::launch("int4_expand", expand_kernel<T>, {dim3(static_cast<unsigned>(grid_for(words))), dim3(kThreads), 0, stream},
              out, w, perm, tiles_k, words);
}

bool int4_gemm_supports(const Int4Matrix& w) { return w.group % 16 == 0 || w.group >= w.k; }

int int4_gemm_splits(const Int4Matrix& w, int multiprocessors) {
  // Enough warps for about 16 per multiprocessor, each with at least four tiles of k.
  const int64_t row_tiles = (w.n + kInt4TileRows - 1) / kInt4TileRows;
  const int64_t tiles_k = (w.k + kInt4TileCols - 1) / kInt4TileCols;
  const int64_t blocks = (row_tiles + kRowTiles<1> - 1) / kRowTiles<1>;
  const int64_t want = std::max<int64_t>(1, (16 * std::max(multiprocessors, 1)) / (blocks * kGemmWarps));
  const int64_t most = std::max<int64_t>(1, tiles_k / (4 * kGemmWarps));
  constexpr int64_t kMostSplits = 64;  // lint: not-a-warp (a bound on the workspace)
  return static_cast<int>(std::min<int64_t>({want, most, kMostSplits}));
}

template <class T>
void int4_gemm(T* y, const T* x, const Int4Matrix& w, const T* bias, int64_t m, int64_t ldx, int64_t ldy, int splits,
               float* workspace, int warp_size, cudaStream_t stream) {
  check_matrix("int4_gemm", w);
  LW_CHECK(m >= 0 && m <= kInt4GemmMaxRows, "int4_gemm: " << m << " rows; at most " << kInt4GemmMaxRows);
  LW_CHECK(int4_gemm_supports(w), "int4_gemm: groups of " << w.group << " columns are not whole 16-column steps");
  LW_CHECK(w.k % 8 == 0 && ldx % 2 == 0 && gpu::aligned_to(4, x),
           "int4_gemm: K = " << w.k << " must be a multiple of 8 and x's rows 4-byte aligned (ldx " << ldx << ")");
  LW_CHECK(splits >= 1 && (splits == 1 || workspace), "int4_gemm: " << splits << " splits need a workspace");
  if (m == 0) return;
  const int64_t row_tiles = (w.n + kInt4TileRows - 1) / kInt4TileRows;
  const int64_t tiles_k = (w.k + kInt4TileCols - 1) / kInt4TileCols;
  const int64_t per_warp = (tiles_k + splits * kGemmWarps - 1) / (splits * kGemmWarps);
  LW_CHECK(row_tiles <= 0x7fffffff, "int4_gemm: " << w.n << " rows exceed the grid limit");
  auto cfg = [&](int row_tiles_per_block) {
    return gpu::LaunchConfig{
        dim3(static_cast<unsigned>((row_tiles + row_tiles_per_block - 1) / row_tiles_per_block), static_cast<unsigned>(splits)),
        dim3(kGemmWarps * warp_size), 0, stream};
  };
  const int nt = static_cast<int>((m + 15) / 16);
  switch (nt) {
    case 1: gpu::launch("int4_gemm", gemm_kernel<T, 1>, cfg(kRowTiles<1>), y, x, w, bias, m, ldx, ldy, per_warp, workspace); break;
    case 2: gpu::launch("int4_gemm", gemm_kernel<T, 2>, cfg(kRowTiles<2>), y, x, w, bias, m, ldx, ldy, per_warp, workspace); break;
    default: gpu::launch("int4_gemm", gemm_kernel<T, 4>, cfg(kRowTiles<4>), y, x, w, bias, m, ldx, ldy, per_warp, workspace); break;
  }
  if (splits > 1) {
    gpu::launch("int4_reduce_splits", reduce_splits_kernel<T>,
                {dim3(static_cast<unsigned>(grid_for(m * w.n))), dim3(kThreads), 0, stream}, y, workspace, bias, m, w.n, ldy,
                splits);
  }
}

template <class T>
void gather_columns(T* out, const T* x, const int32_t* perm, int64_t rows, int64_t k, int64_t ldx, cudaStream_t stream) {
  if (rows == 0 || k == 0) return;
  gpu::launch("gather_columns", gather_columns_kernel<T>,
              {dim3(static_cast<unsigned>(grid_for(rows * k))), dim3(kThreads), 0, stream}, out, x, perm, rows, k, ldx);
}

#define LW_INT4_INSTANTIATE(T)                                                                                          \
  template void int4_expand<T>(T*, const Int4Matrix&, const int32_t*, cudaStream_t);                                    \
  template void gather_columns<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t, cudaStream_t);
LW_INT4_INSTANTIATE(float)
LW_INT4_INSTANTIATE(half)
LW_INT4_INSTANTIATE(bfloat16)
#undef LW_INT4_INSTANTIATE
template void int4_gemm<half>(half*, const half*, const Int4Matrix&, const half*, int64_t, int64_t, int64_t, int, float*,
                              int, cudaStream_t);
template void int4_gemm<bfloat16>(bfloat16*, const bfloat16*, const Int4Matrix&, const bfloat16*, int64_t, int64_t,
                                  int64_t, int, float*, int, cudaStream_t);

}  // namespace lw::kernels
