#include "kernels/quant/gguf_mma_gemv.h"

#include <type_traits>

#include "gpu/launch.h"
#include "gpu/matrix_fragment.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"
#include "kernels/expert_rows.h"
#include "kernels/quant/gguf_gemv.h"
#include "kernels/quant/gguf_blocks.h"
#include "kernels/quant/int4_tiles.h"

namespace lw::kernels {

namespace {

namespace mma = gpu::mma;

constexpr int kMaxWarps = 8;  // warps of a block, each a slice of the row tile's blocks of K
constexpr int kPassRows = 8;  // rows of x a block serves: the narrow multiply's columns
static_assert(kPassRows == mma::kNarrowCols, "a pass is the narrow multiply's columns");
constexpr int kSubBlock = 32;  // lint: not-a-warp (elements sharing a scale and a minimum)

// ---- which k of a sub-block each fragment slot holds ----
// The lanes holding one row of A ("ranks") each hold E of a 16-column step's slots; a lane's
// slots of both steps of a sub-block take one run of 2E bytes of the row's 32-byte chunk (the
// low nibbles for the even sub-block, the high for the odd), so that a lane reads one run per
// chunk and row. Position p (0..E-1) of a step is byte byte_of_pos(p) of the step's E bytes: fragment
// pairs (p, p + 1), p even, are bytes (0, 2) or (1, 3) of a 32-bit word, which one mask turns
// into a pair of 16-bit lanes (int4_tiles::decode_pair). B takes x at the same k.
constexpr int kE = mma::kA / mma::kARowSlots;
constexpr int kRanks = 16 / kE;
constexpr int kRunBytes = 2 * kE;  // a lane's bytes of a chunk (both steps)
constexpr int kRunWords = kRunBytes / 4;
constexpr int kRunElems = kRunBytes;  // x's elements a lane's B takes per sub-block (a nibble a byte)
static_assert(kE % 4 == 0 && kRanks * kE == 16, "a step's slots are whole words per rank");

LW_DEVICE_INLINE constexpr int byte_of_pos(int p) {
  return 4 * (p / 4) + ((p % 4) == 1 ? 2 : (p % 4) == 2 ? 1 : p % 4);
}

// The rank of a lane among those holding its A row (its B column's lanes are ranked alike), and
// the position of A element i and of B element i among their lane's elements of one step.
template <mma::Layout L = mma::kLayout>
LW_DEVICE_INLINE constexpr int lane_rank(int lane) {
  if constexpr (L == mma::Layout::nvidia_m16n8k16) return lane & 3;
  else if constexpr (L == mma::Layout::amd_mfma_16x16) return (lane >> 4) & 3;
  (void)lane;
  return 0;
}
template <mma::Layout L = mma::kLayout>
LW_DEVICE_INLINE constexpr int a_pos(int i) {
  if constexpr (L == mma::Layout::nvidia_m16n8k16) return (i & 1) + 2 * (i >> 2);
  return i;
}
template <mma::Layout L = mma::kLayout>
LW_DEVICE_INLINE constexpr int b_pos(int i) {
  if constexpr (L == mma::Layout::nvidia_m16n8k16) return (i & 1) + 2 * ((i >> 1) & 1);
  return i;
}

#if defined(LW_TARGET_HOST)
// Proof in the host builds (every layout) that the ranks and positions above agree with the
// layer's accessors: the k slot of (rank, position) is one per step (the lanes of row 0 define
// it), every lane's A and B elements lie there, A's pairs are positions (p, p + 1) of one row
// with p even, and a lane's B elements of the narrow multiply's columns are all of one column.
template <mma::Layout L>
constexpr bool slots_agree() {
  constexpr int A = mma::Shape<L>::a, B = mma::Shape<L>::b, E = A / mma::Shape<L>::a_row_slots;
  const int warp = L == mma::Layout::amd_mfma_16x16 ? 64 : 32;  // lint: not-a-warp (the layouts' warps)
  int slot[16][16];  // [rank][position]
  for (auto& r : slot)
    for (int& v : r) v = -1;
  bool seen[16] = {};
  for (int lane = 0; lane < warp; ++lane)
    for (int i = 0; i < A; ++i)
      if (mma::a_row<L>(lane, i) == 0) {
        int& v = slot[lane_rank<L>(lane)][a_pos<L>(i)];
        const int col = mma::a_col<L>(lane, i);
        if (v >= 0 && v != col) return false;
        if (v < 0 && seen[col]) return false;
        v = col;
        seen[col] = true;
      }
  for (bool s : seen)
    if (!s) return false;
  for (int lane = 0; lane < warp; ++lane) {
    const int r = lane_rank<L>(lane);
    for (int i = 0; i < A; ++i) {
      if (a_pos<L>(i) >= E || mma::a_col<L>(lane, i) != slot[r][a_pos<L>(i)]) return false;
      if (i % 2 == 0 &&
          (mma::a_slot<L>(i + 1) != mma::a_slot<L>(i) || a_pos<L>(i) % 2 != 0 || a_pos<L>(i + 1) != a_pos<L>(i) + 1))
        return false;
    }
    for (int i = 0; i < B; ++i) {
      if (mma::b_col<L>(lane, i) >= mma::kNarrowCols) continue;
      if (b_pos<L>(i) >= E || mma::b_row<L>(lane, i) != slot[r][b_pos<L>(i)]) return false;
      if (mma::b_col<L>(lane, i) != mma::b_col<L>(lane, 0)) return false;
    }
  }
  return true;
}
static_assert(slots_agree<mma::Layout::nvidia_m16n8k16>() && slots_agree<mma::Layout::amd_mfma_16x16>() &&
                  slots_agree<mma::Layout::amd_wmma_16x16>(),
              "the K-quant GEMV's k slots disagree with the matrix-fragment layer");
#endif

// ---- Q4_K and Q5_K ----
// Super-blocks of 256 elements: a header of d, dmin (fp16) and twelve bytes of 6-bit scales and
// minima (16 bytes), then 4-bit values in 32-byte chunks, chunk c holding sub-block 2c in its low
// nibbles and 2c + 1 in its high; Q5_K adds a fifth bit per element (+16), bit j of qh[l] for
// element l of sub-block j.
constexpr int kSuperElems = 256;  // lint: not-a-warp (a super-block's elements)
constexpr int kChunks = 4;
constexpr int kChunkBytes = 32;  // lint: not-a-warp (a chunk: a byte per element of its sub-blocks)
struct Q4k {
  static constexpr int kElems = kSuperElems, kBytes = 144, kQs = 16;  // d, dmin, scales[12], qs[128]
  static constexpr bool kFifthBit = false, kStepHalves = false;
  static constexpr BlockFormat kFormat = BlockFormat::q4_k;
  static constexpr const char* kName = "gguf_mma_gemv_q4_k";
};
struct Q5k {
  static constexpr int kElems = kSuperElems, kBytes = 176, kQs = 48, kQh = 16;  // d, dmin, scales[12], qh[32], qs[128]
  static constexpr bool kFifthBit = true, kStepHalves = false;
  static constexpr BlockFormat kFormat = BlockFormat::q5_k;
  static constexpr const char* kName = "gguf_mma_gemv_q5_k";
};

// Byte j of `word` as a float: the bits of 2^23 + byte (one byte permute on NVIDIA), less 2^23.
LW_DEVICE_INLINE float byte_to_float(uint32_t word, int j) {
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__)
  const uint32_t bits = __byte_perm(word, 0x4b000000u, 0x7440u | static_cast<uint32_t>(j));
#else
  const uint32_t bits = 0x4b000000u | ((word >> (8 * j)) & 0xffu);
#endif
  return __builtin_bit_cast(float, bits) - 8388608.0f;
}

// Word i of a lane's words, i known at compile time or not (selects: no indexed registers,
// which would go to local memory).
template <int N>
LW_DEVICE_INLINE uint32_t word_at(const uint32_t (&words)[N], int i) {
  uint32_t v = words[0];
#pragma unroll
  for (int j = 1; j < N; ++j) v = i == j ? words[j] : v;
  return v;
}

// ---- Q6_K, Q3_K and Q2_K: a scale per 16 elements ----
// A super-block's 256 elements are two halves of four quarters of 32: element l (0..31) of quarter
// t of half f is element 128 f + 32 t + l, its bits fields of byte l of one 32-byte chunk of each
// of the format's planes of values. A quarter is one sub-block whose two multiply steps (16
// elements each, a lane's piece of E at 16 s + E rank) take scales of their own: run 8 f + 2 t + s.
// Each format names its chunks (chunk_at), how the bits of bytes j and j + 2 of a word of its
// pieces make a pair of 16-bit lanes (value_bits, before the magic number; the zero point kZero),
// its header words of scales (kHeadWords at kHead) and d (at kD: fp16, or with dmin a word), and
// a run's scale (and minimum).
//
// Q6_K: 210 bytes, ql[128] (the low four bits), qh[64] (the high two), sixteen int8 scales, d; an
// element is d * scale * (q - 32), its low bits nibble t / 2 of ql[64 f + 32 (t % 2) + l], its
// high bits 2t, 2t + 1 of qh[32 f + l].
struct Q6k {
  static constexpr int kElems = kSuperElems, kBytes = 210;
  static constexpr bool kStepHalves = true, kMin = false, kDWord = false;
  static constexpr int kChunks = 6, kHeadWords = 4, kHead = 192, kD = 208, kZero = 32;  // lint: not-a-warp
  static constexpr uint32_t kHeadXor = 0x80808080u;  // the int8 scales + 128, read as unsigned bytes
  static constexpr bool kLoadsAhead = false;  // one row: one super-block at a time (two spill)
  static constexpr BlockFormat kFormat = BlockFormat::q6_k;
  static constexpr const char* kName = "gguf_mma_gemv_q6_k";
  LW_DEVICE_INLINE static constexpr int chunk_at(int c) { return kChunkBytes * c; }  // ql[0..3], qh[0..1]
  LW_DEVICE_INLINE static uint32_t value_bits(const uint32_t (&q)[kChunks][kRunWords], int f, int t, int w, int j) {
    const int bit = 8 * j + 2 * t;  // qh's bits 2t, 2t + 1 of byte j, moved to bits 4 and 5
    const uint32_t hw = q[4 + f][w];
    return ((q[2 * f + t % 2][w] >> (8 * j + 4 * (t / 2))) & 0x000f000fu) |
           ((bit >= 4 ? hw >> (bit - 4) : hw << (4 - bit)) & 0x00300030u);
  }
  LW_DEVICE_INLINE static float scale(const uint32_t (&head)[kHeadWords], float d, int run) {
    return d * (byte_to_float(word_at(head, run / 4), run % 4) - 128.0f);
  }
};

// Q3_K: 110 bytes, hmask[32] (the third bit), qs[64] (the low two), twelve bytes of 6-bit scales
// (offset by 32), d; an element is d * (scale - 32) * (q - 4), its low bits 2t, 2t + 1 of
// qs[32 f + l], its third bit 4 f + t of hmask[l].
struct Q3k {
  static constexpr int kElems = kSuperElems, kBytes = 110;
  static constexpr bool kStepHalves = true, kMin = false, kDWord = false;
  static constexpr int kChunks = 3, kHeadWords = 3, kHead = 96, kD = 108, kZero = 4;
  static constexpr uint32_t kHeadXor = 0;
  static constexpr bool kLoadsAhead = true;  // one row: loads_ahead
  static constexpr BlockFormat kFormat = BlockFormat::q3_k;
  static constexpr const char* kName = "gguf_mma_gemv_q3_k";
  // qs[0..1], hmask
  LW_DEVICE_INLINE static constexpr int chunk_at(int c) { return c < 2 ? kChunkBytes * (c + 1) : 0; }
  LW_DEVICE_INLINE static uint32_t value_bits(const uint32_t (&q)[kChunks][kRunWords], int f, int t, int w, int j) {
    return ((q[f][w] >> (8 * j + 2 * t)) & 0x00030003u) | (((q[2][w] >> (8 * j + 4 * f + t)) & 0x00010001u) << 2);
  }
  // Scale `run`: the low four bits nibble run / 8 of byte run % 8, the high two bits 2 (run / 4)
  // of byte 8 + run % 4 (where run is a constant, shifts of known words).
  LW_DEVICE_INLINE static float scale(const uint32_t (&head)[kHeadWords], float d, int run) {
    auto byte = [&](int i) { return static_cast<int>((word_at(head, i / 4) >> (8 * (i % 4))) & 0xffu); };
    const int low = (byte(run % 8) >> (4 * (run / 8))) & 0x0f, high = (byte(8 + run % 4) >> (2 * (run / 4))) & 3;
    return d * static_cast<float>((low | (high << 4)) - 32);  // lint: not-a-warp
  }
};

// Q2_K: 84 bytes, sixteen bytes of scales (the scale in the low nibble, the minimum in the high),
// qs[64] (two bits), d and dmin; an element is d * scale * q - dmin * min, its bits 2t, 2t + 1 of
// qs[32 f + l]. 4-aligned: every field read 4 bytes at a time.
struct Q2k {
  static constexpr int kElems = kSuperElems, kBytes = 84;
  static constexpr bool kStepHalves = true, kMin = true, kDWord = true;
  static constexpr int kChunks = 2, kHeadWords = 4, kHead = 0, kD = 80, kZero = 0;
  static constexpr uint32_t kHeadXor = 0;
  static constexpr bool kLoadsAhead = true;  // one row: loads_ahead
  static constexpr BlockFormat kFormat = BlockFormat::q2_k;
  static constexpr const char* kName = "gguf_mma_gemv_q2_k";
  LW_DEVICE_INLINE static constexpr int chunk_at(int c) { return 16 + kChunkBytes * c; }
  LW_DEVICE_INLINE static uint32_t value_bits(const uint32_t (&q)[kChunks][kRunWords], int f, int t, int w, int j) {
    return (q[f][w] >> (8 * j + 2 * t)) & 0x00030003u;
  }
  LW_DEVICE_INLINE static float scale(const uint32_t (&head)[kHeadWords], float d, int run) {
    return d * byte_to_float(word_at(head, run / 4) & 0x0f0f0f0fu, run % 4);
  }
  LW_DEVICE_INLINE static float min(const uint32_t (&head)[kHeadWords], float dmin, int run) {
    return dmin * byte_to_float((word_at(head, run / 4) >> 4) & 0x0f0f0f0fu, run % 4);
  }
};

// Q4_0, Q4_1, Q5_0 and Q5_1: blocks of 32 elements, d (fp16), for Q4_1 and Q5_1 a minimum m
// (fp16), for Q5_0 and Q5_1 the fifth bits qh (bit i for element i), then qs[16]: element j the
// low nibble of qs[j], 16 + j the high; an element is d (q - zero) or d q + m. A block is one
// sub-block whose multiply step s takes the nibbles s of the 16 bytes. Q4_0's 18-byte and Q5_0's
// 22-byte blocks are 2-aligned only: their fields are read 4 bytes at a time where they are
// 4-aligned, else 2 (load_field).
template <int Bytes, int Qh, int Qs, int Zero, bool Min>
struct Legacy {
  static constexpr int kElems = kSubBlock, kBytes = Bytes, kQh = Qh, kQs = Qs, kZero = Zero;
  static constexpr bool kMin = Min, kFifthBit = Qh > 0, kStepHalves = true, kEightBit = false;
  static constexpr BlockFormat kFormat = Bytes == 18   ? BlockFormat::q4_0
                                         : Bytes == 20 ? BlockFormat::q4_1
                                         : Bytes == 22 ? BlockFormat::q5_0
                                                       : BlockFormat::q5_1;
  static constexpr const char* kName = Bytes == 18   ? "gguf_mma_gemv_q4_0"
                                       : Bytes == 20 ? "gguf_mma_gemv_q4_1"
                                       : Bytes == 22 ? "gguf_mma_gemv_q5_0"
                                                     : "gguf_mma_gemv_q5_1";
  static_assert(kQs + 16 == kBytes && kQs == 2 + (kMin ? 2 : 0) + (kFifthBit ? 4 : 0) &&
                    (!kFifthBit || kQh == 2 + (kMin ? 2 : 0)) && (kMin ? kZero == 0 : kZero > 0),
                "a 32-element block: d, m or qh where it has them, then qs[16]");
};
using Q40 = Legacy<18, 0, 2, 8, false>;   // d, qs[16]
using Q41 = Legacy<20, 0, 4, 0, true>;    // d, m, qs[16]
using Q50 = Legacy<22, 2, 6, 16, false>;  // d, qh[4], qs[16]
using Q51 = Legacy<24, 4, 8, 0, true>;    // d, m, qh[4], qs[16]

// Q8_0: 34-byte blocks of 32 elements, d (fp16) then qs[32] (int8); an element is d q. Each value
// its own byte, so a lane's pieces of both multiply steps are one run of 2E bytes (as Q4_K's
// chunks), 2-aligned like Q4_0's fields (load_field).
struct Q80 {
  static constexpr int kElems = kSubBlock, kBytes = 34, kQs = 2, kZero = 0;
  static constexpr bool kMin = false, kFifthBit = false, kStepHalves = false, kEightBit = true;
  static constexpr BlockFormat kFormat = BlockFormat::q8_0;
  static constexpr const char* kName = "gguf_mma_gemv_q8_0";
};

// Where a lane's piece of a sub-block's multiply step `step` begins in its x (and, for the
// K-quants, in a 32-byte chunk of values): for Q4_K, Q5_K and Q8_0 one run of 2E bytes a rank
// holds both steps' pieces; where step s is elements [16 s, 16 s + 16) (kStepHalves: Q6_K, Q3_K
// and Q2_K, whose scales cover 16 elements, so that each multiply takes one scale, and the 4- and
// 5-bit 32-element formats, whose steps are the low and high nibbles of 16 bytes), a piece of E
// at 16 s + E rank. The pieces of a
// lane's two steps are kStepStride<F> apart.
template <class F>
LW_DEVICE_INLINE constexpr int piece_at(int rank, int step) {
  return F::kStepHalves ? 16 * step + kE * rank : kRunBytes * rank + kE * step;  // lint: not-a-warp
}
template <class F>
constexpr int kStepStride = F::kStepHalves ? 16 : kE;  // piece_at(rank, 1) - piece_at(rank, 0)

// What a lane reads of one super-block: its runs of each chunk (and of qh) for each of its A
// rows, and the headers of its C rows.
template <class F>
struct Loaded {
  uint32_t qs[mma::kARowSlots][kChunks][kRunWords];
  uint32_t qh[mma::kARowSlots][F::kFifthBit ? kRunWords : 1];
  uint32_t head[mma::kRowSlots][4];
};

// The scales and minima of a C row's sub-blocks, d * sc and dmin * m in fp32 as ggml forms them
// (each 6-bit field made a float exactly, through the bits of 2^23 + v): the header's fields
// unpacked once a super-block, one sub-block's products formed where they are used.
struct SubBlockScales {
  float d[mma::kRowSlots], dmin[mma::kRowSlots];
  // Byte j of sc[sl][0] / mn[sl][0]: sub-block j's fields (j < 4); of sc[sl][1] / mn[sl][1]: 4 + j's.
  uint32_t sc[mma::kRowSlots][2], mn[mma::kRowSlots][2];
  template <class F>
  LW_DEVICE_INLINE explicit SubBlockScales(const Loaded<F>& in) {
#pragma unroll
    for (int sl = 0; sl < mma::kRowSlots; ++sl) {
      const uint32_t h0 = in.head[sl][0], h1 = in.head[sl][1], h2 = in.head[sl][2], h3 = in.head[sl][3];
      d[sl] = gguf::fp16_bits_to_float(h0);
      dmin[sl] = gguf::fp16_bits_to_float(h0 >> 16);
      sc[sl][0] = h1 & 0x3f3f3f3fu;
      mn[sl][0] = h2 & 0x3f3f3f3fu;
      sc[sl][1] = (h3 & 0x0f0f0f0fu) | ((h1 >> 2) & 0x30303030u);
      mn[sl][1] = ((h3 >> 4) & 0x0f0f0f0fu) | ((h2 >> 2) & 0x30303030u);
    }
  }
  // `sub` known at compile time or not (the word chosen by a select: no indexed registers).
  LW_DEVICE_INLINE float d1(int sl, int sub) const {
    return d[sl] * byte_to_float(sub < 4 ? sc[sl][0] : sc[sl][1], sub % 4);
  }
  LW_DEVICE_INLINE float m1(int sl, int sub) const {
    return dmin[sl] * byte_to_float(sub < 4 ? mn[sl][0] : mn[sl][1], sub % 4);
  }
};

// x's elements a lane's B fragments of one sub-block take, its pieces of both steps (E each,
// Stride apart from `piece`, the first): zeros where has_row is false (one row's columns past
// its scale groups).
template <class T, int V, int Stride>
LW_DEVICE_INLINE void load_x_run(T (&run)[kRunElems], const T* piece, bool has_row) {
  // Vectors within a piece, or across both where they are contiguous.
  constexpr int P = Stride == kE ? kRunElems : kE, W = V < P ? V : P;
  if (has_row) {
#pragma unroll
    for (int c = 0; c < kRunElems; c += W) {
      const gpu::Vec<T, W> v = gpu::load_vec<W>(piece + (c / kE) * Stride + c % kE);
#pragma unroll
      for (int e = 0; e < W; ++e) run[c + e] = v.v[e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < kRunElems; ++e) run[e] = gpu::from_float<T>(0.0f);
  }
}

// B of step `step` from a lane's run of x (load_x_run): each element at its A slot's k.
template <class T>
LW_DEVICE_INLINE mma::FragB<T> x_fragment(const T (&xr)[kRunElems], int lane, int step) {
  mma::FragB<T> bx;
#pragma unroll
  for (int i = 0; i < mma::kB; ++i)
    bx.x[i] = mma::b_col(lane, i) < mma::kNarrowCols ? xr[step * kE + byte_of_pos(b_pos(i))] : gpu::from_float<T>(0.0f);
  return bx;
}

// A lane's places in one row tile (16 rows of W from row0) and pass of x: the start of its
// piece in each of its A rows, the start of each of its C rows, and its piece of its x row. Rows
// past N read W's last row; columns past the pass's `rows` its last row of x (in_pass false): C's
// columns past `rows` are not written, and a column of C sums its own column of B alone (one row
// of x, whose C columns are added, takes zeros there instead).
template <class F, class T>
struct LaneRows {
  const uint8_t* a[mma::kARowSlots];
  const uint8_t* c[mma::kRowSlots];
  const T* x;
  bool in_pass;
  LW_DEVICE_INLINE LaneRows(const T* x0, const uint8_t* w, int64_t row0, int rows, int64_t n, int64_t k, int64_t ldx,
                            int lane) {
    const int rank = lane_rank(lane);
    const int64_t row_bytes = k / F::kElems * F::kBytes;
#pragma unroll
    for (int sl = 0; sl < mma::kARowSlots; ++sl) {
      const int64_t r = row0 + mma::a_slot_row(lane, sl);
      a[sl] = w + (r < n ? r : n - 1) * row_bytes + piece_at<F>(rank, 0);
    }
#pragma unroll
    for (int sl = 0; sl < mma::kRowSlots; ++sl) {
      const int64_t r = row0 + mma::slot_row(lane, sl);
      c[sl] = w + (r < n ? r : n - 1) * row_bytes;
    }
    const int x_col = mma::b_col(lane, 0);
    in_pass = x_col < rows;
    x = x0 + static_cast<int64_t>(in_pass ? x_col : rows - 1) * ldx + piece_at<F>(rank, 0);
  }
};

// b where keep is all ones, zeros where it is 0 (a mask of its 32-bit words).
template <class T>
LW_DEVICE_INLINE mma::FragB<T> masked(const mma::FragB<T>& b, uint32_t keep) {
  static_assert(sizeof(b.x) % 4 == 0, "B's elements fill whole 32-bit words");
  uint32_t words[sizeof(b.x) / 4];
  __builtin_memcpy(words, b.x, sizeof(words));
#pragma unroll
  for (uint32_t& v : words) v &= keep;
  mma::FragB<T> r;
  __builtin_memcpy(r.x, words, sizeof(words));
  return r;
}

// multiply(b, in) over super-blocks [first, last) with the next one's loads (load(b, in)) issued
// before this one's multiplies: two L in registers, taking turns.
template <class L, class Load, class Multiply>
LW_DEVICE_INLINE void loads_ahead(int first, int last, Load&& load, Multiply&& multiply) {
  L even, odd;
  if (first < last) load(first, even);
  for (int b = first; b < last; b += 2) {
    if (b + 1 < last) load(b + 1, odd);
    multiply(b, even);
    if (b + 1 == last) break;
    if (b + 2 < last) load(b + 2, even);
    multiply(b + 1, odd);
  }
}

// The sums of one row tile (16 rows of W from row0) over super-blocks [first, last) of its
// rows, for `rows` rows of x (<= kPassRows) from x: the warp's C fragment, summed over its slice.
// OneRow (rows == 1): C's columns are the super-block's sub-blocks instead of x's rows
// (kquant_finish<T, true> adds them; runs16_slice and legacy_columns do the same with their
// scale groups).
template <class F, class T, int V, bool OneRow>
LW_DEVICE_INLINE void kquant_slice(mma::FragC& total, const T* x, const uint8_t* w, int64_t row0, int rows, int64_t n,
                                   int64_t k, int64_t ldx, int first, int last) {
  const int lane = gpu::lane_id();
  const LaneRows<F, T> at(x, w, row0, rows, n, k, ldx, lane);

  auto load = [&](int b, Loaded<F>& to) {
    constexpr int U = kRunWords < 4 ? kRunWords : 4;
#pragma unroll
    for (int sl = 0; sl < mma::kARowSlots; ++sl) {
      const uint8_t* block = at.a[sl] + static_cast<int64_t>(b) * F::kBytes;
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
#pragma unroll
        for (int o = 0; o < kRunWords; o += U) {
          const auto v =
              int4_tiles::load_run<U>(reinterpret_cast<const uint32_t*>(block + F::kQs + kChunkBytes * c) + o);
#pragma unroll
          for (int u = 0; u < U; ++u) to.qs[sl][c][o + u] = v.v[u];
        }
      if constexpr (F::kFifthBit) {
#pragma unroll
        for (int o = 0; o < kRunWords; o += U) {
          const auto v = int4_tiles::load_run<U>(reinterpret_cast<const uint32_t*>(block + F::kQh) + o);
#pragma unroll
          for (int u = 0; u < U; ++u) to.qh[sl][o + u] = v.v[u];
        }
      }
    }
#pragma unroll
    for (int sl = 0; sl < mma::kRowSlots; ++sl) {
      const auto v =
          gpu::load_vec<4>(reinterpret_cast<const uint32_t*>(at.c[sl] + static_cast<int64_t>(b) * F::kBytes));
#pragma unroll
      for (int u = 0; u < 4; ++u) to.head[sl][u] = v.v[u];
    }
  };

  mma::FragA<T> ones;
#pragma unroll
  for (int i = 0; i < mma::kA; ++i) ones.x[i] = gpu::from_float<T>(1.0f);
  constexpr uint32_t kBias = int4_tiles::kMagic<T> * 0x10001u;  // the magic, no zero point

  // A of sub-block 2c + h's multiply step `step`.
  auto decode_step = [&](const Loaded<F>& in, int c, int h, int step) {
    mma::FragA<T> a;
    const int sub = 2 * c + h;
#pragma unroll
    for (int i = 0; i < mma::kA; i += 2) {
      const int p = a_pos(i), byte = step * kE + byte_of_pos(p), sl = mma::a_slot(i);
      // Pair (p, p + 1) is bytes (0, 2) or (1, 3) of its word: nibbles 2 (p % 4 / 2) + h.
      const int nibble = 2 * ((p % 4) / 2) + h;
      if constexpr (F::kFifthBit) {
        // Bit `sub` of the same bytes of qh, moved to bit 4 of each 16-bit half.
        const int bit = 8 * ((p % 4) / 2) + sub;
        const uint32_t hw = in.qh[sl][byte / 4];
        const uint32_t fifth = (bit >= 4 ? hw >> (bit - 4) : hw << (4 - bit)) & 0x00100010u;
        const uint32_t bits = ((in.qs[sl][c][byte / 4] >> (4 * nibble)) & 0x000f000fu) | fifth | kBias;
        int4_tiles::unbias_pair<T>(bits, kBias, a.x[i], a.x[i + 1]);
      } else {
        int4_tiles::decode_pair<T>(in.qs[sl][c][byte / 4], nibble, kBias, a.x[i], a.x[i + 1]);
      }
    }
    return a;
  };

  auto multiply = [&](int b, const Loaded<F>& in) {
    const SubBlockScales s(in);
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // the low nibbles (sub-block 2c), then the high (2c + 1)
        const int sub = 2 * c + h;
        T xr[kRunElems];
        load_x_run<T, V, kStepStride<F>>(xr, at.x + static_cast<int64_t>(b) * kSuperElems + sub * kSubBlock, true);
        mma::FragC q, sx;
        mma::fill(q, 0.0f);
        mma::fill(sx, 0.0f);
#pragma unroll
        for (int step = 0; step < 2; ++step) {
          const mma::FragA<T> a = decode_step(in, c, h, step);
          const mma::FragB<T> bx = x_fragment(xr, lane, step);
          mma::mma_narrow(q, a, bx, q);
          mma::mma_narrow(sx, ones, bx, sx);
        }
#pragma unroll
        for (int i = 0; i < mma::kNarrowC; ++i) {
          const int sl = mma::c_slot(i);
          total.x[i] += s.d1(sl, sub) * q.x[i];  // two contractions (a multiply-add each)
          total.x[i] -= s.m1(sl, sub) * sx.x[i];
        }
      }
  };

  // One row of x: C's columns are the super-block's sub-blocks. The lanes of B's column j hold
  // sub-block j's x (loaded once a super-block); sub-block j's multiplies take B with the other
  // columns' lanes zeroed, so that column j sums sub-block j alone, and C is scaled once a
  // super-block (each lane its elements' sub-blocks) instead of once a sub-block, by every
  // lane for column 0's sake. kquant_finish adds the columns.
  const int col = mma::b_col(lane, 0);  // the lane's sub-block (one column per lane: slots_agree)
  const T* x_col = x + piece_at<F>(lane_rank(lane), 0) + col * kSubBlock;
  auto multiply_columns = [&](int b, const Loaded<F>& in) {
    T xr[kRunElems];
    load_x_run<T, V, kStepStride<F>>(xr, x_col + static_cast<int64_t>(b) * kSuperElems, col < 2 * kChunks);
    const mma::FragB<T> bx[2] = {x_fragment(xr, lane, 0), x_fragment(xr, lane, 1)};
    mma::FragC q, sx;
    mma::fill(q, 0.0f);
    mma::fill(sx, 0.0f);
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // the low nibbles (sub-block 2c), then the high (2c + 1)
        const int sub = 2 * c + h;
        const uint32_t keep = col == sub ? ~0u : 0u;
#pragma unroll
        for (int step = 0; step < 2; ++step) {
          const mma::FragA<T> a = decode_step(in, c, h, step);
          const mma::FragB<T> bs = masked(bx[step], keep);
          mma::mma_narrow(q, a, bs, q);
          mma::mma_narrow(sx, ones, bs, sx);
        }
      }
    const SubBlockScales s(in);
#pragma unroll
    for (int i = 0; i < mma::kNarrowC; ++i) {
      const int sl = mma::c_slot(i), sub = mma::c_col(lane, i);
      if (sub < 2 * kChunks) total.x[i] += s.d1(sl, sub) * q.x[i] - s.m1(sl, sub) * sx.x[i];
    }
  };

  if constexpr (OneRow) {
    // The next super-block's loads go out before this one's multiplies: one row leaves the
    // registers for a second in flight (within the launch bound's 128).
    loads_ahead<Loaded<F>>(first, last, load, multiply_columns);
  } else {
    // One super-block at a time: a second in flight (48 more registers) measured 3% slower in
    // the engine (docs/PERFORMANCE.md); the warps of the multiprocessor keep the loads coming.
    for (int b = first; b < last; ++b) {
      Loaded<F> in;
      load(b, in);
      multiply(b, in);
    }
  }
}

// Four bytes at p, 2-aligned (the fields of Q6_K's, Q3_K's, Q4_0's, Q5_0's and Q8_0's blocks where
// they are not 4-aligned), from two 2-byte loads.
LW_DEVICE_INLINE uint32_t load_u32_2aligned(const uint8_t* p) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__)
  return __byte_perm(__ldg(h), __ldg(h + 1), 0x5410);
#else
  return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
#endif
}

// N words from p, which the caller knows to be 2 bytes past a 4-byte boundary: N aligned 4-byte
// loads from p - 2 and one 2-byte load of the last two bytes, joined by byte permutes (N + 1
// loads where load_u32_2aligned takes 2 N; nothing read past p + 4 N).
template <int N>
LW_DEVICE_INLINE void load_words_2past(uint32_t (&to)[N], const uint8_t* p) {
  const auto* w = reinterpret_cast<const uint32_t*>(p - 2);
#if defined(LW_TARGET_HOST)
  if ((reinterpret_cast<uintptr_t>(w) & 3) != 0) __builtin_trap();  // as a GPU faults on it
#endif
  uint32_t word[N + 1];
#pragma unroll
  for (int i = 0; i < N; ++i) word[i] = w[i];
  word[N] = *reinterpret_cast<const uint16_t*>(p + 4 * N - 2);
#pragma unroll
  for (int i = 0; i < N; ++i) {
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__)
    to[i] = __byte_perm(word[i], word[i + 1], 0x5432);
#else
    to[i] = (word[i] >> 16) | (word[i + 1] << 16);
#endif
  }
}

// Four bytes at p: one load where the caller knows p 4-aligned, else two.
template <bool Aligned>
LW_DEVICE_INLINE uint32_t load_u32(const uint8_t* p) {
  if constexpr (Aligned) {
#if defined(LW_TARGET_HOST)
    if ((reinterpret_cast<uintptr_t>(p) & 3) != 0) __builtin_trap();  // as a GPU faults on it
#endif
    return *reinterpret_cast<const uint32_t*>(p);
  } else {
    return load_u32_2aligned(p);
  }
}

// What a lane reads of one super-block of a format with a scale per 16 elements: its pieces of
// each chunk for each of its A rows; the header words and d of its C rows.
template <class F>
struct LoadedRuns {
  uint32_t q[mma::kARowSlots][F::kChunks][kRunWords];
  uint32_t head[mma::kRowSlots][F::kHeadWords];
  uint32_t d[mma::kRowSlots];
};

// kquant_slice for Q6_K, Q3_K and Q2_K: a multiply per 16 elements (one scale each), and for Q2_K
// one with an A of ones for its minimum.
template <class F, class T, int V, bool OneRow>
LW_DEVICE_INLINE void runs16_slice(mma::FragC& total, const T* x, const uint8_t* w, int64_t row0, int rows, int64_t n,
                                   int64_t k, int64_t ldx, int first, int last) {
  constexpr int kPieceWords = kE / 4;
  const int lane = gpu::lane_id();
  const LaneRows<F, T> at(x, w, row0, rows, n, k, ldx, lane);

  // aligned: std::true_type where super-block b's 4-byte fields are 4-aligned (one load each).
  auto load = [&](int b, LoadedRuns<F>& to, auto aligned) {
    constexpr bool A = decltype(aligned)::value;
#pragma unroll
    for (int sl = 0; sl < mma::kARowSlots; ++sl) {
      const uint8_t* block = at.a[sl] + static_cast<int64_t>(b) * F::kBytes;
#pragma unroll
      for (int step = 0; step < 2; ++step)
#pragma unroll
        for (int o = 0; o < kPieceWords; ++o) {
          const int at_piece = step * kStepStride<F> + 4 * o, word = step * kPieceWords + o;
#pragma unroll
          for (int c = 0; c < F::kChunks; ++c) to.q[sl][c][word] = load_u32<A>(block + F::chunk_at(c) + at_piece);
        }
    }
#pragma unroll
    for (int sl = 0; sl < mma::kRowSlots; ++sl) {
      const uint8_t* block = at.c[sl] + static_cast<int64_t>(b) * F::kBytes;
#pragma unroll
      for (int j = 0; j < F::kHeadWords; ++j) to.head[sl][j] = load_u32<A>(block + F::kHead + 4 * j) ^ F::kHeadXor;
      if constexpr (F::kDWord) to.d[sl] = load_u32<A>(block + F::kD);
      else to.d[sl] = *reinterpret_cast<const uint16_t*>(block + F::kD);
    }
  };

  mma::FragA<T> ones;
#pragma unroll
  for (int i = 0; i < mma::kA; ++i) ones.x[i] = gpu::from_float<T>(1.0f);
  constexpr uint32_t kBias = int4_tiles::kMagic<T> * 0x10001u;
  constexpr uint32_t kZeroBias = (int4_tiles::kMagic<T> + F::kZero) * 0x10001u;

  // A of run 8 f + 2 t + step.
  auto decode_run = [&](const LoadedRuns<F>& in, int f, int t, int step) {
    mma::FragA<T> a;
#pragma unroll
    for (int i = 0; i < mma::kA; i += 2) {
      // Pair (p, p + 1) is bytes (0, 2) or (1, 3) of its word.
      const int p = a_pos(i), byte = step * kE + byte_of_pos(p), sl = mma::a_slot(i);
      const uint32_t bits = F::value_bits(in.q[sl], f, t, byte / 4, (p % 4) / 2) | kBias;
      int4_tiles::unbias_pair<T>(bits, kZeroBias, a.x[i], a.x[i + 1]);
    }
    return a;
  };

  // d (and dmin) of each C row slot.
  auto unpack_d = [](const LoadedRuns<F>& in, float (&d)[mma::kRowSlots], float (&dmin)[mma::kRowSlots]) {
#pragma unroll
    for (int sl = 0; sl < mma::kRowSlots; ++sl) {
      d[sl] = gguf::fp16_bits_to_float(in.d[sl]);
      dmin[sl] = F::kMin ? gguf::fp16_bits_to_float(in.d[sl] >> 16) : 0.0f;
    }
  };

  // One row of x (kquant_slice's OneRow): C's column j takes run 8 f + j of each half f of the
  // super-block (its lanes' B that run's x, the other lanes' zero), scaled once a half.
  const int col = mma::b_col(lane, 0);
  const T* x_col = x + piece_at<F>(lane_rank(lane), 0) + col * 16;  // lint: not-a-warp (a run's elements)
  auto multiply_columns = [&](int b, const LoadedRuns<F>& in) {
    float d[mma::kRowSlots], dmin[mma::kRowSlots];
    unpack_d(in, d, dmin);
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      // The lane's piece of its run (E elements), as step 0 of a run of x.
      T xr[kRunElems];
      constexpr int W = V < kE ? V : kE;
#pragma unroll
      for (int e = 0; e < kRunElems; e += W) {
        gpu::Vec<T, W> v;
        if (e < kE && col < mma::kNarrowCols)
          v = gpu::load_vec<W>(x_col + static_cast<int64_t>(b) * kSuperElems + 128 * f + e);
        else
#pragma unroll
          for (int u = 0; u < W; ++u) v.v[u] = gpu::from_float<T>(0.0f);
#pragma unroll
        for (int u = 0; u < W; ++u) xr[e + u] = v.v[u];
      }
      const mma::FragB<T> bx = x_fragment(xr, lane, 0);
      mma::FragC q, sx;
      mma::fill(q, 0.0f);
      if constexpr (F::kMin) mma::fill(sx, 0.0f);
#pragma unroll
      for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int step = 0; step < 2; ++step) {
          const mma::FragB<T> bs = masked(bx, col == 2 * t + step ? ~0u : 0u);
          mma::mma_narrow(q, decode_run(in, f, t, step), bs, q);
          if constexpr (F::kMin) mma::mma_narrow(sx, ones, bs, sx);
        }
#pragma unroll
      for (int i = 0; i < mma::kNarrowC; ++i) {
        const int sl = mma::c_slot(i), j = mma::c_col(lane, i);
        if (j >= mma::kNarrowCols) continue;
        total.x[i] += F::scale(in.head[sl], d[sl], 8 * f + j) * q.x[i];
        if constexpr (F::kMin) total.x[i] -= F::min(in.head[sl], dmin[sl], 8 * f + j) * sx.x[i];
      }
    }
  };

  auto multiply = [&](int b, const LoadedRuns<F>& in) {
    float d[mma::kRowSlots], dmin[mma::kRowSlots];
    unpack_d(in, d, dmin);
#pragma unroll
    for (int f = 0; f < 2; ++f)
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        T xr[kRunElems];
        const T* piece = at.x + static_cast<int64_t>(b) * kSuperElems + 128 * f + kSubBlock * t;
        load_x_run<T, V, kStepStride<F>>(xr, piece, true);
#pragma unroll
        for (int step = 0; step < 2; ++step) {
          const mma::FragA<T> a = decode_run(in, f, t, step);
          const mma::FragB<T> bx = x_fragment(xr, lane, step);
          mma::FragC q, sx;
          mma::fill(q, 0.0f);
          mma::mma_narrow(q, a, bx, q);
          if constexpr (F::kMin) {
            mma::fill(sx, 0.0f);
            mma::mma_narrow(sx, ones, bx, sx);
          }
          const int run = 8 * f + 2 * t + step;
#pragma unroll
          for (int i = 0; i < mma::kNarrowC; ++i) {
            const int sl = mma::c_slot(i);
            total.x[i] += F::scale(in.head[sl], d[sl], run) * q.x[i];
            if constexpr (F::kMin) total.x[i] -= F::min(in.head[sl], dmin[sl], run) * sx.x[i];
          }
        }
      }
  };

  // 4-aligned blocks (Q2_K) keep every field 4-aligned; 2-aligned ones (Q6_K, Q3_K) where the
  // rows start 4-aligned (K / 256 even) in the even super-blocks (offsets multiples of 4), the
  // odd ones' 2 bytes past.
  const bool even_aligned = (k / F::kElems * F::kBytes) % 4 == 0;
  auto load_at = [&](int b, LoadedRuns<F>& in) {
    if constexpr (F::kBytes % 4 == 0) {
      load(b, in, std::true_type{});
    } else {
      if (even_aligned && b % 2 == 0) load(b, in, std::true_type{});
      else load(b, in, std::false_type{});
    }
  };
  if constexpr (OneRow && F::kLoadsAhead) {
    loads_ahead<LoadedRuns<F>>(first, last, load_at, multiply_columns);
  } else {
    for (int b = first; b < last; ++b) {
      LoadedRuns<F> in;
      load_at(b, in);
      if constexpr (OneRow) multiply_columns(b, in);
      else multiply(b, in);
    }
  }
}

// What a lane reads of G blocks of a 32-element format: its piece of qs (Q8_0: its run) and the
// block's qh (shifted so that bit 16 s + i is its step s's element i) for each of its A rows; d
// and m of each of its C rows (d | m << 16).
template <class F>
constexpr int kQsWords = F::kEightBit ? kRunWords : kE / 4;
// Blocks loaded at a time (a K-quant super-block's elements); one row of x takes them as C's
// columns (legacy_columns).
constexpr int kLegacyGroup = 8;
static_assert(kLegacyGroup == mma::kNarrowCols, "a group's blocks are the narrow multiply's columns");
template <class F, int G>
struct LoadedLegacy {
  uint32_t qs[G][mma::kARowSlots][kQsWords<F>];
  uint32_t qh[G][mma::kARowSlots];
  uint32_t head[G][mma::kRowSlots];
};

// Four bytes of the field `offset` bytes into block g of a group of G: one load where it is
// 4-aligned, else two. Q4_1's 20- and Q5_1's 24-byte blocks in a 16-aligned matrix keep every
// 4-byte field 4-aligned; Q4_0's 18-, Q5_0's 22- and Q8_0's 34-byte blocks do where the rows
// start 4-aligned and the group at an even block (`even`): block g's fields by g's parity (Q4_0's
// qs every other block), fewer load instructions, by which the kernel is bound.
template <class F, bool Even>
LW_DEVICE_INLINE uint32_t load_field(const uint8_t* p, int g, int offset) {
  if (F::kBytes % 4 == 0 || (Even && (g * F::kBytes + offset) % 4 == 0)) return load_u32<true>(p);
  return load_u32<false>(p);
}

template <class F, bool Even, int G, class T, bool Heads = true>
LW_DEVICE_INLINE void legacy_load(LoadedLegacy<F, G>& to, const LaneRows<F, T>& at, int rank, int b) {
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int64_t at_block = static_cast<int64_t>(b + g) * F::kBytes;
#pragma unroll
    for (int sl = 0; sl < mma::kARowSlots; ++sl) {
      const uint8_t* block = at.a[sl] + at_block;  // the lane's piece's offset E rank (4-aligned) included
      if (F::kEightBit && Even && (g * F::kBytes + F::kQs) % 4 == 2) {
        load_words_2past(to.qs[g][sl], block + F::kQs);  // Q8_0's run 2 bytes past a word
      } else {
#pragma unroll
        for (int o = 0; o < kQsWords<F>; ++o) to.qs[g][sl][o] = load_field<F, Even>(block + F::kQs + 4 * o, g, F::kQs);
      }
      if constexpr (F::kFifthBit)
        to.qh[g][sl] = load_field<F, Even>(block - kE * rank + F::kQh, g, F::kQh) >> (kE * rank);
    }
#pragma unroll
    for (int sl = 0; sl < mma::kRowSlots && Heads; ++sl) {
      const uint8_t* block = at.c[sl] + at_block;
      to.head[g][sl] = F::kMin ? load_field<F, Even>(block, g, 0) : *reinterpret_cast<const uint16_t*>(block);
    }
  }
}

// Fragment elements from bytes j and j + 2 of `word` (signed 8-bit integers) exactly in T: f16
// through its magic number (1024 + 128 + q: f16's spacing there is 1); bf16, whose 8 significant
// bits cannot hold 128 + q past 256, through the fp32 bits of 2^23 + 128 + q (byte_to_float).
template <class T>
LW_DEVICE_INLINE void int8_pair(uint32_t word, int j, T& lo, T& hi) {
  const uint32_t biased = word ^ 0x80808080u;  // q + 128, unsigned
  if constexpr (std::is_same_v<T, half>) {
    constexpr uint32_t kMagic = int4_tiles::kMagic<T> * 0x10001u, kBias = (int4_tiles::kMagic<T> + 128) * 0x10001u;
    int4_tiles::unbias_pair<T>(((biased >> (8 * j)) & 0x00ff00ffu) | kMagic, kBias, lo, hi);
  } else {
    lo = gpu::from_float<T>(byte_to_float(biased, j) - 128.0f);
    hi = gpu::from_float<T>(byte_to_float(biased, j + 2) - 128.0f);
  }
}

// A of block g's multiply step `step`.
template <class F, int G, class T>
LW_DEVICE_INLINE mma::FragA<T> legacy_step(const LoadedLegacy<F, G>& in, int g, int step) {
  constexpr uint32_t kBias = int4_tiles::kMagic<T> * 0x10001u;
  constexpr uint32_t kZeroBias = (int4_tiles::kMagic<T> + F::kZero) * 0x10001u;
  mma::FragA<T> a;
#pragma unroll
  for (int i = 0; i < mma::kA; i += 2) {
    // Pair (p, p + 1) is bytes (0, 2) or (1, 3) of its word: Q8_0's word of the step in the
    // lane's run, else nibbles 2 (p % 4 / 2) + step of its piece, their fifth bits bits pos
    // and pos + 2 of the lane's qh, moved to bits 4 and 20.
    const int p = a_pos(i), byte = byte_of_pos(p), sl = mma::a_slot(i);
    if constexpr (F::kEightBit) {
      int8_pair<T>(in.qs[g][sl][step * (kE / 4) + byte / 4], (p % 4) / 2, a.x[i], a.x[i + 1]);
    } else {
      uint32_t bits = (in.qs[g][sl][byte / 4] >> (4 * (2 * ((p % 4) / 2) + step))) & 0x000f000fu;
      if constexpr (F::kFifthBit) {
        const uint32_t h = in.qh[g][sl] >> (16 * step + byte);  // lint: not-a-warp (a step's elements)
        bits |= ((h << 4) & 0x10u) | ((h << 18) & 0x100000u);
      }
      int4_tiles::unbias_pair<T>(bits | kBias, kZeroBias, a.x[i], a.x[i + 1]);
    }
  }
  return a;
}

// G blocks from b, C's columns x's rows; OneRow: the blocks one row of x takes outside the
// groups of legacy_columns (zeros in B's other columns, which kquant_finish<T, true> adds).
template <class F, int G, class T, int V, bool OneRow>
LW_DEVICE_INLINE void legacy_multiply(mma::FragC& total, const LoadedLegacy<F, G>& in, const LaneRows<F, T>& at,
                                      const mma::FragA<T>& ones, int lane, int b) {
#pragma unroll
  for (int g = 0; g < G; ++g) {
    T xr[kRunElems];
    load_x_run<T, V, kStepStride<F>>(xr, at.x + static_cast<int64_t>(b + g) * F::kElems, !OneRow || at.in_pass);
    mma::FragC q, sx;
    mma::fill(q, 0.0f);
    if constexpr (F::kMin) mma::fill(sx, 0.0f);
#pragma unroll
    for (int step = 0; step < 2; ++step) {
      const mma::FragA<T> a = legacy_step<F, G, T>(in, g, step);
      const mma::FragB<T> bx = x_fragment(xr, lane, step);
      mma::mma_narrow(q, a, bx, q);
      if constexpr (F::kMin) mma::mma_narrow(sx, ones, bx, sx);
    }
#pragma unroll
    for (int i = 0; i < mma::kNarrowC; ++i) {
      const uint32_t head = in.head[g][mma::c_slot(i)];
      total.x[i] += gguf::fp16_bits_to_float(head) * q.x[i];
      if constexpr (F::kMin) total.x[i] += gguf::fp16_bits_to_float(head >> 16) * sx.x[i];
    }
  }
}

// One row of x (kquant_slice's OneRow) over a group of kLegacyGroup blocks from b: C's column j
// takes block b + j (its lanes' B that block's x, the other lanes' zero), scaled once a group,
// each lane loading d (and m) of its C elements' blocks only.
template <class F, class T, int V>
LW_DEVICE_INLINE void legacy_columns(mma::FragC& total, const LoadedLegacy<F, kLegacyGroup>& in,
                                     const LaneRows<F, T>& at, const T* x_col, const mma::FragA<T>& ones, int lane,
                                     int b) {
  constexpr int G = kLegacyGroup;
  const int col = mma::b_col(lane, 0);
  float d[mma::kNarrowC], m[mma::kNarrowC];
#pragma unroll
  for (int i = 0; i < mma::kNarrowC; ++i) {
    const int j = mma::c_col(lane, i) < G ? mma::c_col(lane, i) : 0;
    const uint8_t* block = at.c[mma::c_slot(i)] + static_cast<int64_t>(b + j) * F::kBytes;
    const uint32_t head = F::kMin ? load_u32<true>(block) : *reinterpret_cast<const uint16_t*>(block);
    d[i] = gguf::fp16_bits_to_float(head);
    m[i] = F::kMin ? gguf::fp16_bits_to_float(head >> 16) : 0.0f;
  }
  T xr[kRunElems];
  load_x_run<T, V, kStepStride<F>>(xr, x_col + static_cast<int64_t>(b) * F::kElems, col < G);
  const mma::FragB<T> bx[2] = {x_fragment(xr, lane, 0), x_fragment(xr, lane, 1)};
  mma::FragC q, sx;
  mma::fill(q, 0.0f);
  if constexpr (F::kMin) mma::fill(sx, 0.0f);
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int step = 0; step < 2; ++step) {
      const mma::FragB<T> bs = masked(bx[step], col == g ? ~0u : 0u);
      mma::mma_narrow(q, legacy_step<F, G, T>(in, g, step), bs, q);
      if constexpr (F::kMin) mma::mma_narrow(sx, ones, bs, sx);
    }
#pragma unroll
  for (int i = 0; i < mma::kNarrowC; ++i) {
    if (mma::c_col(lane, i) >= G) continue;
    total.x[i] += d[i] * q.x[i];
    if constexpr (F::kMin) total.x[i] += m[i] * sx.x[i];
  }
}

// kquant_slice for the 32-element formats: kLegacyGroup blocks loaded at a time (a K-quant
// super-block's elements), then the rest one by one.
static_assert(kLegacyGroup * kSubBlock == kSuperElems, "a group of blocks holds a super-block's elements");
template <class F, class T, int V, bool OneRow>
LW_DEVICE_INLINE void legacy_slice(mma::FragC& total, const T* x, const uint8_t* w, int64_t row0, int rows, int64_t n,
                                   int64_t k, int64_t ldx, int first, int last) {
  const int lane = gpu::lane_id(), rank = lane_rank(lane);
  const LaneRows<F, T> at(x, w, row0, rows, n, k, ldx, lane);
  mma::FragA<T> ones;
#pragma unroll
  for (int i = 0; i < mma::kA; ++i) ones.x[i] = gpu::from_float<T>(1.0f);
  // 2-aligned blocks: a first odd block alone, so that the groups start at even blocks where the
  // rows start 4-aligned (K / 32 even, as in every model's shapes).
  const bool even = F::kBytes % 4 != 0 && (k / F::kElems * F::kBytes) % 4 == 0;
  int b = first;
  if (even && b % 2 == 1 && b < last) {
    LoadedLegacy<F, 1> in;
    legacy_load<F, false>(in, at, rank, b);
    legacy_multiply<F, 1, T, V, OneRow>(total, in, at, ones, lane, b);
    ++b;
  }
  const T* x_col = x + piece_at<F>(rank, 0) + mma::b_col(lane, 0) * kSubBlock;  // OneRow: the lane's block's x
  for (; b + kLegacyGroup <= last; b += kLegacyGroup) {
    LoadedLegacy<F, kLegacyGroup> in;
    if (even) legacy_load<F, true, kLegacyGroup, T, !OneRow>(in, at, rank, b);
    else legacy_load<F, false, kLegacyGroup, T, !OneRow>(in, at, rank, b);
    if constexpr (OneRow) legacy_columns<F, T, V>(total, in, at, x_col, ones, lane, b);
    else legacy_multiply<F, kLegacyGroup, T, V, false>(total, in, at, ones, lane, b);
  }
  for (; b < last; ++b) {
    LoadedLegacy<F, 1> in;
    legacy_load<F, false>(in, at, rank, b);
    legacy_multiply<F, 1, T, V, OneRow>(total, in, at, ones, lane, b);
  }
}

// The slice of the format's kernel; x in whole vectors (gguf_mma_gemv's requirement).
template <class F, class T, bool OneRow>
LW_DEVICE_INLINE void format_slice(mma::FragC& total, const T* x, const uint8_t* w, int64_t row0, int rows, int64_t n,
                                   int64_t k, int64_t ldx, int first, int last) {
  constexpr int V = gpu::kVecWidth<T>;
  if constexpr (F::kElems == kSuperElems && F::kStepHalves) {
    runs16_slice<F, T, V, OneRow>(total, x, w, row0, rows, n, k, ldx, first, last);
  } else if constexpr (F::kElems == kSubBlock) {
    legacy_slice<F, T, V, OneRow>(total, x, w, row0, rows, n, k, ldx, first, last);
  } else {
    kquant_slice<F, T, V, OneRow>(total, x, w, row0, rows, n, k, ldx, first, last);
  }
}

// Adds the warps' sums in warp order (shared memory) and writes the pass's rows of y: element i
// of the lane's C fragment is y[c_col][row0 + c_row]; for OneRow (C's columns sub-blocks) y's
// one row, row0 + r the sum of C's row r over its kNarrowCols columns in column order.
template <class T, bool OneRow>
LW_DEVICE_INLINE void kquant_finish(const mma::FragC& total, T* y, const T* bias, int64_t row0, int rows, int64_t n,
                                    int64_t ldy) {
  LW_SHARED(float, partial, [kMaxWarps * gpu::kWarpSize * mma::kNarrowC]);
  LW_SHARED(float, sums, [16][mma::kNarrowCols]);  // OneRow: C's sums by row and column
  const int warp = gpu::warp_id(), lane = gpu::lane_id(), warps = static_cast<int>(blockDim.x) / gpu::kWarpSize;
#pragma unroll
  for (int i = 0; i < mma::kNarrowC; ++i) partial[(warp * gpu::kWarpSize + lane) * mma::kNarrowC + i] = total.x[i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int i = 0; i < mma::kNarrowC; ++i) {
    float v = partial[lane * mma::kNarrowC + i];
    for (int wi = 1; wi < warps; ++wi) v += partial[(wi * gpu::kWarpSize + lane) * mma::kNarrowC + i];
    const int col = mma::c_col(lane, i);
    const int64_t row = row0 + mma::c_row(lane, i);
    if constexpr (OneRow) {
      if (col < mma::kNarrowCols) sums[mma::c_row(lane, i)][col] = v;
    } else if (col < rows && row < n) {
      y[col * ldy + row] = gpu::from_float<T>(v + (bias ? gpu::to_float(bias[row]) : 0.0f));
    }
  }
  if constexpr (OneRow) {
    (void)rows, (void)ldy;
    gpu::sync_warp();
    const int64_t row = row0 + lane;
    if (lane < 16 && row < n) {
      float v = 0.0f;
#pragma unroll
      for (int c = 0; c < mma::kNarrowCols; ++c) v += sums[lane][c];
      y[row] = gpu::from_float<T>(v + (bias ? gpu::to_float(bias[row]) : 0.0f));
    }
  }
}

// The slice of a row tile's super-blocks warp `warp` of `warps` takes.
LW_DEVICE_INLINE void warp_slice(int64_t blocks, int warp, int warps, int& first, int& last) {
  const int per = static_cast<int>((blocks + warps - 1) / warps);
  first = warp * per < blocks ? warp * per : static_cast<int>(blocks);
  last = first + per < blocks ? first + per : static_cast<int>(blocks);
}

// NVIDIA: two blocks of 8 warps a multiprocessor (the bound holds the registers at 128).
#if defined(LW_TARGET_CUDA)
#define LW_KQUANT_BOUNDS __launch_bounds__(kMaxWarps * 32, 2)  // lint: not-a-warp (CUDA's warp)
#else
#define LW_KQUANT_BOUNDS
#endif

// A block per row tile (16 rows of W, blockIdx.x) and pass of 8 rows of x (blockIdx.y); OneRow
// where x has one row (C's columns then the scale groups of 32 or 16 elements: the slices).
template <class F, class T, bool OneRow>
__global__ void LW_KQUANT_BOUNDS kquant_gemv_kernel(T* __restrict__ y, const T* __restrict__ x,
                                                    const uint8_t* __restrict__ w, const T* __restrict__ bias,
                                                    int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldy) {
#if LW_MATRIX_CORES
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16, x0 = static_cast<int64_t>(blockIdx.y) * kPassRows;
  const int rows = m - x0 < kPassRows ? static_cast<int>(m - x0) : kPassRows;
  int first, last;
  warp_slice(k / F::kElems, gpu::warp_id(), static_cast<int>(blockDim.x) / gpu::kWarpSize, first, last);
  mma::FragC total;
  mma::fill(total, 0.0f);
  format_slice<F, T, OneRow>(total, x + x0 * ldx, w, row0, rows, n, k, ldx, first, last);
  kquant_finish<T, OneRow>(total, y + x0 * ldy, bias, row0, rows, n, ldy);
#else
  (void)y, (void)x, (void)w, (void)bias, (void)m, (void)n, (void)k, (void)ldx, (void)ldy;
#endif
}

// The same over one matrix per expert: block (row tile, r) serves row r of x where r begins a
// pass of one of its expert's rows (gguf_gemv.cu's grouped kernel's plan).
template <class F, class T>
__global__ void LW_KQUANT_BOUNDS kquant_grouped_gemv_kernel(T* __restrict__ y, const T* __restrict__ x,
                                                            const uint8_t* const* experts, const int32_t* offsets,
                                                            int count, int64_t rows, int64_t n, int64_t k) {
#if LW_MATRIX_CORES
  gpu::begin_after_prior_grid();  // the offsets and x come from the kernels before
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16, r0 = blockIdx.y;
  ExpertPass pass;
  if (!pass_at_row(offsets, count, rows, r0, kPassRows, pass)) return;  // the whole block
  int first, last;
  warp_slice(k / F::kElems, gpu::warp_id(), static_cast<int>(blockDim.x) / gpu::kWarpSize, first, last);
  mma::FragC total;
  mma::fill(total, 0.0f);
  const int pass_rows = static_cast<int>(pass.end - r0);
  // An expert of one row as gguf_mma_gemv takes one row of x (its bits too).
  if (pass_rows == 1 && r0 == offsets[pass.expert]) {
    format_slice<F, T, true>(total, x + r0 * k, experts[pass.expert], row0, 1, n, k, k, first, last);
    kquant_finish<T, true>(total, y + r0 * n, static_cast<const T*>(nullptr), row0, 1, n, n);
  } else {
    format_slice<F, T, false>(total, x + r0 * k, experts[pass.expert], row0, pass_rows, n, k, k, first, last);
    kquant_finish<T, false>(total, y + r0 * n, static_cast<const T*>(nullptr), row0, pass_rows, n, n);
  }
#else
  (void)y, (void)x, (void)experts, (void)offsets, (void)count, (void)rows, (void)n, (void)k;
#endif
}

// Warps a block (each a slice of the row tile's blocks): 8 where every block of 8 warps is
// resident at once (two a multiprocessor, the register bound), else 4, which leaves fewer warps
// for the last wave (H100, Q4_K, 1 and 8 rows: 8 warps 6-10% faster at 4096 x 14336 and level at
// 4096 x 4096, 256 tiles; 4 warps 17-23% faster at 6144 x 4096, 384 tiles, and 18% at 128256 x
// 4096; 2 warps level with 4 at 14336 x 4096; docs/PERFORMANCE.md); never more than a row's blocks
// (of 256 elements: a K-quant's super-block, 8 of the 32-element blocks).
int block_warps(int64_t tiles, int64_t k, int multiprocessors) {
  const int64_t blocks = k / kSuperElems;
  const int warps = tiles <= static_cast<int64_t>(multiprocessors) * 2 ? kMaxWarps : 4;
  return static_cast<int>(blocks < 1 ? 1 : blocks < warps ? blocks : warps);
}

void check_kquant(const char* op, BlockFormat format, int64_t m, int64_t n, int64_t k) {
  LW_CHECK(gguf_mma_gemv_serves(format), op << ": no kernel for " << block_format_name(format)
                                            << " (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q2_K to Q6_K only)");
  const int64_t elems = block_format_elems(format);
  LW_CHECK(m >= 0 && n >= 0 && k >= 0 && k % elems == 0,
           op << ": [M, N, K] = [" << m << ", " << n << ", " << k << "]: K must be whole blocks of " << elems);
  LW_CHECK(k / elems <= 0x7fffffff, op << ": K = " << k << " exceeds the kernel's block index");
}

// The formats' structs, each naming its BlockFormat (kFormat): the one list that both what the
// kernel serves and the dispatch read.
template <class... Fs>
struct FormatList {
  static constexpr bool has(BlockFormat format) { return ((format == Fs::kFormat) || ...); }
  // run.template operator()<F>() for the struct of `format` (one the list has).
  template <class Run>
  static void with(BlockFormat format, Run&& run) {
    (void)((format == Fs::kFormat ? (run.template operator()<Fs>(), true) : false) || ...);
  }
};
using Formats = FormatList<Q40, Q41, Q50, Q51, Q80, Q2k, Q3k, Q4k, Q5k, Q6k>;

}  // namespace

bool gguf_mma_gemv_serves(BlockFormat format) { return Formats::has(format); }

template <class T>
void gguf_mma_gemv(T* y, const T* x, const void* w, BlockFormat format, const T* bias, int64_t m, int64_t n, int64_t k,
                   int64_t ldx, int64_t ldy, int multiprocessors, cudaStream_t stream) {
  static_assert(std::is_same_v<T, half> || std::is_same_v<T, bfloat16>,
                "the matrix-fragment layer multiplies f16 or bf16");
  const char* op = "gguf_mma_gemv";
  check_kquant(op, format, m, n, k);
  LW_CHECK(gpu::aligned_to(16, w), op << ": the weights must start 16-byte aligned");
  check_x_vectors(op, x, ldx, sizeof(T));
  if (m == 0 || n == 0 || k == 0) return;
  const int64_t tiles = (n + 15) / 16, passes = (m + kPassRows - 1) / kPassRows;
  LW_CHECK(tiles <= 0x7fffffff && passes <= 65535,
           op << ": " << n << " output columns x " << m << " rows exceed the grid limits");
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(passes)),
                              dim3(block_warps(tiles * passes, k, multiprocessors) * gpu::kWarpSize), 0, stream};
  const auto* wb = static_cast<const uint8_t*>(w);
  Formats::with(format, [&]<class F>() {
    const auto kernel = m == 1 ? kquant_gemv_kernel<F, T, true> : kquant_gemv_kernel<F, T, false>;
    gpu::launch(F::kName, kernel, cfg, y, x, wb, bias, m, n, k, ldx, ldy);
  });
}

template <class T>
void gguf_mma_grouped_gemv(T* y, const T* x, const void* const* experts, int64_t count, BlockFormat format,
                           const int32_t* offsets, int64_t rows, int64_t n, int64_t k, int multiprocessors,
                           cudaStream_t stream) {
  static_assert(std::is_same_v<T, half> || std::is_same_v<T, bfloat16>,
                "the matrix-fragment layer multiplies f16 or bf16");
  const char* op = "gguf_mma_grouped_gemv";
  check_kquant(op, format, rows, n, k);
  LW_CHECK(experts && offsets && count >= 1 && count <= 0x7fffffff,
           op << ": " << count << " experts (with their matrices and offsets on the device)");
  LW_CHECK(rows <= 65535, op << ": " << rows << " rows of x exceed the grid limit");
  check_x_vectors(op, x, k, sizeof(T));
  if (rows == 0 || n == 0 || k == 0) return;
  const int64_t tiles = (n + 15) / 16;
  LW_CHECK(tiles <= 0x7fffffff, op << ": " << n << " output columns exceed the grid limit");
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(rows)),
                              dim3(block_warps(tiles, k, multiprocessors) * gpu::kWarpSize), 0, stream,
                              gpu::kOverlapsPrior};
  const auto* table = reinterpret_cast<const uint8_t* const*>(experts);
  Formats::with(format, [&]<class F>() {
    gpu::launch(op, kquant_grouped_gemv_kernel<F, T>, cfg, y, x, table, offsets, static_cast<int>(count), rows, n, k);
  });
}

#define LW_GGUF_MMA_GEMV(T)                                                                                            \
  template void gguf_mma_gemv<T>(T*, const T*, const void*, BlockFormat, const T*, int64_t, int64_t, int64_t, int64_t, \
                                 int64_t, int, cudaStream_t);                                                          \
  template void gguf_mma_grouped_gemv<T>(T*, const T*, const void* const*, int64_t, BlockFormat, const int32_t*,       \
                                         int64_t, int64_t, int64_t, int, cudaStream_t);
LW_GGUF_MMA_GEMV(half)
LW_GGUF_MMA_GEMV(bfloat16)
#undef LW_GGUF_MMA_GEMV

}  // namespace lw::kernels
