#include "kernels/quant/int4_hopper.h"

#include <cstring>
#include <type_traits>

#include "base/error.h"
#include "gpu/async_copy.h"
#include "gpu/launch.h"
#include "gpu/matrix_fragment.h"
#include "gpu/numeric.h"
#include "gpu/wgmma.h"
#include "kernels/quant/int4_tiles.h"

namespace lw::kernels {

namespace {

namespace mma = gpu::mma;
namespace wg = gpu::wgmma;
using namespace int4_tiles;

constexpr int kWarps = wg::kThreads / 32;  // lint: not-a-warp (CUDA's warp, of a warpgroup)
constexpr int kTilePieces = static_cast<int>(kInt4TileBytes / 16);  // 16-byte pieces of a tile

// A block: WG warpgroups sharing x's rows, each warp R row tiles of weights, NTOK rows of x a
// multiply. Its ring: kStages entries of one 64-column step each, the weight tiles of the
// block's kRowTiles row tiles (every lane's run of each), then x's columns of the step for the
// block's rows of x (swizzled rows of 128 bytes), as many as fit kRingBytes (72 KiB for one
// warpgroup, 104 KiB for two: two blocks a multiprocessor), up to 12.
template <int NTOK_, int R_, int WG_>
struct HopperShape {
  static constexpr int NTOK = NTOK_, R = R_, WG = WG_;
  static constexpr int kThreads = WG * wg::kThreads;
  static constexpr int kRowTiles = WG * kWarps * R;
  static constexpr int kWeightBytes = kRowTiles * static_cast<int>(kInt4TileBytes);
  static constexpr int kEntryBytes = kWeightBytes + NTOK * wg::kRowBytes;
  static_assert(WG == 1 || WG == 2, "one or two warpgroups a block");
  static constexpr int kRingBytes = (WG == 1 ? 72 : 104) * 1024;
  static constexpr int kStages = kRingBytes / kEntryBytes < 12 ? kRingBytes / kEntryBytes : 12;
  static constexpr size_t kSharedBytes = wg::kAtomBytes + size_t{kStages} * kEntryBytes;
  // The wgmma descriptors read x's part of an entry from a 1024-byte swizzle atom.
  static_assert(kWeightBytes % wg::kAtomBytes == 0 && NTOK * wg::kRowBytes % wg::kAtomBytes == 0,
                "entries and their x parts begin on a swizzle atom");
  // Entries in flight besides the two a tile's multiplies may still read (the tile's and the
  // one before's).
  static_assert(kStages >= 3, "a ring of at least three entries");
  static_assert(kRowTiles * kTilePieces % kThreads == 0, "every thread copies whole pieces");
};

// Fragment elements i and i + 1 of a lane's run (zero point subtracted) as one register of a
// wgmma A operand.
template <class T>
LW_DEVICE_INLINE uint32_t decode_register(uint32_t word, int p, uint32_t zbias) {
  T lo, hi;
  decode_pair<T>(word, p, zbias, lo, hi);
  uint16_t l, h;
  memcpy(&l, &lo, 2);
  memcpy(&h, &hi, 2);
  return static_cast<uint32_t>(l) | (static_cast<uint32_t>(h) << 16);
}

// Grid (chunks of NTOK rows of x, blocks of kRowTiles row tiles, k splits of `tiles_per_split`
// 64-column tiles). Warp w of the block (warpgroup w / 4) owns row tiles block_tile0 + w R + r
// (r < R): the r-th multiply of a warpgroup's step takes each of its warps' A fragment of tile
// r, and its accumulator gives each warp its own rows (the layout of the matrix-fragment
// layer's C). Per 64-column tile: each lane's runs read from the ring entry, then 4 steps of R
// multiplies of 64 x NTOK x 16 from the entry's columns of x, one commit a step, pipelined: a
// step's A registers are decoded while the step before multiplies (two sets of A registers),
// and the first step of a tile while the last of the tile before multiplies. The ring refills
// the entry of the tile two before (every warp has waited for its multiplies at the barrier).
// Groups of whole tiles: each group's products accumulate in `sums`, scaled into `total` when
// the next group begins (after waiting for every multiply), as int4.cu's kernels do, in the
// same splits.
template <class T, class Shape>
__global__ void __launch_bounds__(Shape::kThreads) hopper_gemm_kernel(T* y, const T* x, Int4Matrix w, const T* bias, int m,
                                                                     int ldx, int64_t ldy, int tiles_per_split, bool x_vectors,
                                                                     float* workspace) {
#if LW_WGMMA
  constexpr int NTOK = Shape::NTOK, R = Shape::R, NF = NTOK / 16, S = Shape::kStages, E = Shape::kEntryBytes,
                WB = Shape::kWeightBytes, kThreads = Shape::kThreads;
  constexpr int kAhead = S - 2;  // entries asked for ahead of the one multiplied
  LW_DYNAMIC_SHARED(unsigned char, smem_raw);  // 16-byte aligned: the ring is aligned below
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = (wg::kAtomBytes - raw % wg::kAtomBytes) % wg::kAtomBytes;
  unsigned char* const ring = smem_raw + pad;
  const uint32_t ring_addr = raw + pad;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;  // lint: not-a-warp (CUDA's warp)
  const int tok0 = static_cast<int>(blockIdx.x) * NTOK, rows = min(NTOK, m - tok0);
  const int k = static_cast<int>(w.k), n = static_cast<int>(w.n);
  const int tiles_k = (k + static_cast<int>(kInt4TileCols) - 1) / static_cast<int>(kInt4TileCols);
  const int row_tiles = (n + static_cast<int>(kInt4TileRows) - 1) / static_cast<int>(kInt4TileRows);
  const int group_cols = static_cast<int>(w.group < w.k ? w.group : w.k);
  const int groups = (k + group_cols - 1) / group_cols;
  const int first = static_cast<int>(blockIdx.z) * tiles_per_split, last = min(first + tiles_per_split, tiles_k);
  const int block_tile0 = static_cast<int>(blockIdx.y) * Shape::kRowTiles;
  int row0[R];
#pragma unroll
  for (int r = 0; r < R; ++r) row0[r] = (block_tile0 + warp * R + r) * static_cast<int>(kInt4TileRows);

  // Each thread's 16-byte pieces of an entry's weights: piece e = tid + c x kThreads is piece
  // e % 32 of the block's tile e / 32 (warp w's tile r is w R + r), from where it lies at step 0
  // and the words between steps; rows past the matrix read the last row tile (their results are
  // not written).
  constexpr int kWeightCopies = Shape::kRowTiles * kTilePieces / kThreads;
  const uint32_t* weight_src[kWeightCopies];
  int weight_step[kWeightCopies];
#pragma unroll
  for (int c = 0; c < kWeightCopies; ++c) {
    const int e = tid + c * kThreads, read = min(block_tile0 + e / kTilePieces, row_tiles - 1);
    weight_src[c] = static_cast<const uint32_t*>(w.tiles) + tile_index(read, 0, row_tiles, tiles_k) * kTileWords +
                    (e % kTilePieces) * 4;
    weight_step[c] = static_cast<int>(band_width(read, row_tiles)) * kTileWords;
  }
  auto load_weights = [&](int t, int slot) {
    if (t >= last) return;
    uint32_t* const entry = reinterpret_cast<uint32_t*>(ring + slot * E);
#pragma unroll
    for (int c = 0; c < kWeightCopies; ++c) gpu::copy_16_async(entry, (tid + c * kThreads) * 4, weight_src[c] + t * weight_step[c]);
  };
  // The weights do not depend on the kernel before: the first entries' are asked for before the
  // wait.
#pragma unroll
  for (int d = 0; d < kAhead; ++d) load_weights(first + d, d);

  // The group parameters (before the wait: they do not depend on the kernel before).
  GroupParams<T, R> g(w, row0, lane, n, k, groups, group_cols, first, last);

  gpu::begin_after_prior_grid();  // x comes from the kernel before
  // Each thread's 16-byte pieces of an entry's x: piece e = tid + c x kThreads is row e / 8 of
  // the block's rows of x, elements 8 (e % 8) .. of the step. Rows past the block's are zeros in
  // every entry (written once; the copies never reach them).
  constexpr int kPieces = NTOK * 8, kCopies = (kPieces + kThreads - 1) / kThreads;
  for (int e = tid; e < S * (NTOK - rows) * 8; e += kThreads) {
    const int stage = e / ((NTOK - rows) * 8), i = e % ((NTOK - rows) * 8);
    uint4* piece = reinterpret_cast<uint4*>(ring + stage * E + WB + wg::piece_offset(rows + i / 8, i % 8, NTOK));
    *piece = make_uint4(0u, 0u, 0u, 0u);
  }
  // x's columns of step t into entry `slot`; columns past K are zeros (K is a multiple of 8: a
  // piece is wholly in or out).
  auto load_x = [&](int t, int slot) {
    if (t >= last) return;
    unsigned char* const xs = ring + slot * E + WB;
    const int k0 = t * static_cast<int>(kInt4TileCols);
#pragma unroll
    for (int c = 0; c < kCopies; ++c) {
      const int e = tid + c * kThreads, row = e / 8, p = e % 8;
      if (e >= kPieces || row >= rows) continue;
      const bool in = k0 + p * 8 < k;
      const T* src = x + static_cast<int64_t>(tok0 + row) * ldx + (in ? k0 + p * 8 : 0);
      uint32_t* const dst = reinterpret_cast<uint32_t*>(xs + wg::piece_offset(row, p, NTOK));
      if (x_vectors) {
        gpu::copy_16_async_or_zero(dst, 0, reinterpret_cast<const uint32_t*>(src), in);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (in) gpu::copy_4_async(dst, j, reinterpret_cast<const uint32_t*>(src + 2 * j));
          else dst[j] = 0u;
        }
      }
    }
  };
  // One commit an entry, so that the waits count steps (the first also holds the weights asked
  // for before the wait).
#pragma unroll
  for (int d = 0; d < kAhead; ++d) {
    load_x(first + d, d);
    gpu::async_commit();
  }

  mma::FragC total[R][NF], sums[R][NF];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int f = 0; f < NF; ++f) {
      mma::fill(total[r][f], 0.0f);
      mma::fill(sums[r][f], 0.0f);
    }
  auto fold = [&]() {  // the group's sums times their rows' scales (as int4.cu's fold)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < mma::kC; ++i) {
        const float s = g.now.scale[r][mma::c_slot(i)];
#pragma unroll
        for (int f = 0; f < NF; ++f) {
          total[r][f].x[i] += s * sums[r][f].x[i];
          sums[r][f].x[i] = 0.0f;
        }
      }
  };
  if (first < last) g.take_zeros();

  // A lane's runs of the current tile and the A registers of two steps. The empty asm statements
  // keep the decodes after the wait that frees their registers and before the fence of their
  // multiply: the compiler sees neither the multiplies' reads of A nor the waits' effect on them.
  uint32_t words[R][kLaneWords];
  wg::RegsA a[2][R];
  auto decode = [&](int step, wg::RegsA (&to)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) asm volatile("" : "+r"(words[r][step]));
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < mma::kA; i += 2) {
        const int e = step * mma::kA + i;
        to[r].r[i / 2] = decode_register<T>(words[r][e >> 3], (e & 7) >> 1, g.zbias[r][mma::a_slot(i)]);
      }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(to[r].r[j]));
  };
  auto multiply = [&](int step, const wg::RegsA (&from)[R], uint64_t desc) {
#pragma unroll
    for (int r = 0; r < R; ++r) wg::pin(sums[r]);
    wg::fence();
#pragma unroll
    for (int r = 0; r < R; ++r) wg::mma_rs_k<T, NTOK>(sums[r], from[r], wg::advance(desc, wg::k_major_offset(NTOK, 16 * step)));
    wg::commit();
  };

  int slot = 0;  // the entry of step t; step t + kAhead goes to the one two before it
  for (int t = first; t < last; ++t) {
    const int tile_col = t * static_cast<int>(kInt4TileCols);
    if (g.begins_at(tile_col)) {  // groups are whole tiles: a new one begins with this tile
      wg::wait<0>();
#pragma unroll
      for (int r = 0; r < R; ++r) wg::pin(sums[r]);
      fold();
      g.advance();
    } else {
      wg::wait<1>();  // the tile before's third step is done: its registers a[0] are free
    }
    gpu::async_wait<kAhead - 1>();  // step t is in (this thread's pieces) ...
    wg::fence_shared_writes();
    __syncthreads();  // ... and every thread's; every warp's multiplies of tile t - 2 are done
    const int refill = slot + kAhead < S ? slot + kAhead : slot + kAhead - S;
    load_weights(t + kAhead, refill);
    load_x(t + kAhead, refill);
    gpu::async_commit();
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const auto v = gpu::load_vec_at<kLaneWords, uint32_t>(reinterpret_cast<const uint32_t*>(ring + slot * E),
                                                            ((warp * R + r) * kTileWords + lane * kLaneWords));
#pragma unroll
      for (int c = 0; c < kLaneWords; ++c) words[r][c] = v.v[c];
    }
    // Every step, also those of the last tile past K: x's columns there are zeros, so they add
    // nothing, and no branch between the multiplies makes the compiler wait for them.
    const uint64_t desc = wg::k_major(ring_addr + static_cast<uint32_t>(slot * E + WB));
    static_assert(kSteps % 2 == 0, "a tile's steps alternate the two sets of A registers");
    decode(0, a[0]);
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      multiply(step, a[step % 2], desc);
      if (step + 1 < kSteps) {
        wg::wait<1>();  // the step before's multiplies are done: its registers are free
        decode(step + 1, a[(step + 1) % 2]);
      }
    }
    slot = slot + 1 == S ? 0 : slot + 1;
  }
  wg::wait<0>();
#pragma unroll
  for (int r = 0; r < R; ++r) wg::pin(sums[r]);
  gpu::async_wait<0>();  // no copy outlives the block (the ring's tail entries are empty commits)
  if (first < last) fold();

  // One split: y (+ bias); else the split's plane of the workspace ([splits, m, n]).
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int i = 0; i < mma::kC; ++i) {
        const int row = row0[r] + mma::c_row(lane, i), tok = f * 16 + mma::c_col(lane, i);
        if (row >= n || tok >= rows) continue;
        const float v = total[r][f].x[i];
        const int64_t at = static_cast<int64_t>(tok0 + tok);
        if (gridDim.z == 1) {
          y[at * ldy + row] = gpu::from_float<T>(v + (bias ? gpu::to_float(bias[row]) : 0.0f));
        } else {
          workspace[(static_cast<int64_t>(blockIdx.z) * m + at) * n + row] = v;
        }
      }
#else
  (void)y, (void)x, (void)w, (void)bias, (void)m, (void)ldx, (void)ldy, (void)tiles_per_split, (void)x_vectors, (void)workspace;
  __trap();  // built without sm_90a code: int4_hopper_gemm is never called here
#endif
}

}  // namespace

template <class T>
void int4_hopper_gemm(T* y, const T* x, const Int4Matrix& w, const T* bias, int64_t m, int64_t ldx, int64_t ldy, int splits,
                      float* workspace, cudaStream_t stream) {
  LW_CHECK(int4_hopper_serves(w), "int4_hopper_gemm: groups of " << w.group << " columns of K = " << w.k
                                                                 << " are not whole 64-column tiles");
  LW_CHECK(m >= 0 && m < (int64_t{1} << 31) && ldx < (int64_t{1} << 31),
           "int4_hopper_gemm: " << m << " rows of x (ldx " << ldx << ") exceed the kernel's 32-bit rows");
  // The kernel is sm_90a code: another device is refused by name rather than at the launch. The
  // device's capability is asked once per thread and device, not at every launch.
  int device = 0;
  LW_CUDA_CHECK(cudaGetDevice(&device));
  thread_local int known_device = -1, major = 0, minor = 0;
  if (device != known_device) {
    LW_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    LW_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    known_device = device;
  }
  LW_CHECK(major == 9 && minor == 0,
           "int4_hopper_gemm: the kernel is sm_90a code (Hopper); device " << device << " is sm_" << major << minor);
  const int64_t tiles_k = (w.k + kInt4TileCols - 1) / kInt4TileCols, per_split = (tiles_k + splits - 1) / splits;
  const int64_t row_tiles = (w.n + kInt4TileRows - 1) / kInt4TileRows;
  const bool x_vectors = ldx % 8 == 0 && gpu::aligned_to(16, x);
  auto run = [&]<class Shape>() {
    const int64_t chunks = (m + Shape::NTOK - 1) / Shape::NTOK;
    const int64_t row_blocks = (row_tiles + Shape::kRowTiles - 1) / Shape::kRowTiles;
    LW_CHECK(chunks < (int64_t{1} << 31) && row_blocks <= 65535 && splits <= 65535,
             "int4_hopper_gemm: " << m << " rows of x over [" << w.n << ", " << w.k << "] exceed the grid");
    const auto kernel = hopper_gemm_kernel<T, Shape>;
    gpu::allow_dynamic_shared(kernel, Shape::kSharedBytes);
    gpu::launch("int4_gemm_hopper", kernel,
                {dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(row_blocks), static_cast<unsigned>(splits)),
                 dim3(Shape::kThreads), Shape::kSharedBytes, stream, gpu::kOverlapsPrior},
                y, x, w, bias, static_cast<int>(m), static_cast<int>(ldx), ldy, static_cast<int>(per_split), x_vectors, workspace);
  };
  // Up to 16 rows of x one warpgroup of 4 row tiles a warp (219 registers: two blocks a
  // multiprocessor), above two warpgroups of one (121 and 78: two blocks of 8 warps), whose 128
  // weight rows share each read of x: the fastest of the shapes measured on the H100 at 16, 32
  // and 64 rows (docs/PERFORMANCE.md "4-bit weights on Hopper, pipelined").
  if (m <= 16) run.template operator()<HopperShape<16, 4, 1>>();
  else if (m <= 32) run.template operator()<HopperShape<32, 1, 2>>();  // lint: not-a-warp
  else run.template operator()<HopperShape<64, 1, 2>>();               // lint: not-a-warp
}

template void int4_hopper_gemm<half>(half*, const half*, const Int4Matrix&, const half*, int64_t, int64_t, int64_t, int, float*,
                                     cudaStream_t);
template void int4_hopper_gemm<bfloat16>(bfloat16*, const bfloat16*, const Int4Matrix&, const bfloat16*, int64_t, int64_t,
                                         int64_t, int, float*, cudaStream_t);

}  // namespace lw::kernels
