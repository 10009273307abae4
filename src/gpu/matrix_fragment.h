// The portable matrix-fragment layer: one warp's 16x16x16 multiply-accumulate D = A.B + C
// (A: 16 rows x 16 k, B: 16 k x 16 columns, both fp16 or bf16; C and D fp32) on the matrix
// cores of each target, and emulated on the host:
//
//   layout            target                         instruction
//   nvidia_m16n8k16   CUDA sm_80+, emulator warp 32  two mma.sync.m16n8k16 (one per 8 columns)
//   amd_mfma_16x16    HIP gfx90a/gfx942, emulator 64 v_mfma_f32_16x16x16 (f16, bf16_1k), wave64
//   amd_wmma_16x16    HIP gfx11 (RDNA3)              v_wmma_f32_16x16x16 (f16, bf16), wave32
//
// Each lane holds some elements of each fragment; which ones depends on the layout. Kernels
// reach elements only through the accessors below (the row and column of element i of the
// calling lane), never by assuming a layout: the emulator at warp 64 uses the MFMA layout, so
// a kernel that assumes NVIDIA's computes a wrong answer there as it would on an MI300. Every
// lane of the warp must reach mma() together (the sanitizer reports PartialWarpMatrix).
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "gpu/numeric.h"
#include "gpu/warp.h"

#if defined(LW_TARGET_HOST)
#include <source_location>
#endif

namespace lw::gpu::mma {

enum class Layout { nvidia_m16n8k16, amd_mfma_16x16, amd_wmma_16x16 };

// The layout of the code being compiled. LW_SIMT_MATRIX_LAYOUT_WMMA (emulator, warp 32) selects
// RDNA3's instead of NVIDIA's.
#if defined(LW_TARGET_HOST)
#if LW_WARP_SIZE == 64
inline constexpr Layout kLayout = Layout::amd_mfma_16x16;
#elif defined(LW_SIMT_MATRIX_LAYOUT_WMMA)
inline constexpr Layout kLayout = Layout::amd_wmma_16x16;
#else
inline constexpr Layout kLayout = Layout::nvidia_m16n8k16;
#endif
#elif defined(LW_TARGET_HIP)
#if defined(__GFX11__)
inline constexpr Layout kLayout = Layout::amd_wmma_16x16;
#else
inline constexpr Layout kLayout = Layout::amd_mfma_16x16;
#endif
#else
inline constexpr Layout kLayout = Layout::nvidia_m16n8k16;
#endif

// Whether the device code being compiled has the instruction: a kernel built on this layer
// guards its body with it (the HIP build also compiles for architectures without matrix cores,
// and CUDA before sm_80 has no m16n8k16). Host passes of nvcc/hipcc define it too: kernel
// bodies are not generated there.
#if defined(LW_TARGET_HOST)
#define LW_MATRIX_CORES 1
#elif defined(LW_TARGET_HIP)
#if !defined(__HIP_DEVICE_COMPILE__) || defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || \
    defined(__gfx942__) || defined(__gfx950__) || defined(__GFX11__)
#define LW_MATRIX_CORES 1
#else
#define LW_MATRIX_CORES 0
#endif
#else
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define LW_MATRIX_CORES 1
#else
#define LW_MATRIX_CORES 0
#endif
#endif

// Elements per lane of each fragment, distinct C rows per lane (row slots), and how many
// lanes share one row of C (aligned groups: the lanes of a row differ in their low bits).
template <Layout L>
struct Shape;
template <>
struct Shape<Layout::nvidia_m16n8k16> {
  static constexpr int a = 8, b = 8, c = 8, row_slots = 2, row_lanes = 4, a_row_slots = 2;
  // In this layout the C fragment of a 16x16 tile holds the elements of an A fragment in the
  // same order, so P = softmax(S) feeds the next multiplication without leaving registers.
  static constexpr bool c_matches_a = true;
};
template <>
struct Shape<Layout::amd_mfma_16x16> {
  static constexpr int a = 4, b = 4, c = 4, row_slots = 4, row_lanes = 16, a_row_slots = 1;
  static constexpr bool c_matches_a = false;
};
template <>
struct Shape<Layout::amd_wmma_16x16> {
  static constexpr int a = 16, b = 16, c = 8, row_slots = 8, row_lanes = 16, a_row_slots = 1;
  static constexpr bool c_matches_a = false;
};

inline constexpr int kA = Shape<kLayout>::a;
inline constexpr int kB = Shape<kLayout>::b;
inline constexpr int kC = Shape<kLayout>::c;
inline constexpr int kRowSlots = Shape<kLayout>::row_slots;
inline constexpr int kRowLanes = Shape<kLayout>::row_lanes;
inline constexpr int kARowSlots = Shape<kLayout>::a_row_slots;  // distinct rows of A per lane
inline constexpr bool kCMatchesA = Shape<kLayout>::c_matches_a;

// ---- where each element lives: (row, column) of element i held by `lane` ----
// nvidia: g = lane / 4, t = lane % 4. A: rows g, g+8; columns 2t, 2t+1, 2t+8, 2t+9.
// B (per 8-column half h): k 2t, 2t+1, 2t+8, 2t+9; column g + 8h. C like B's columns, A's rows.
// mfma: A row lane%16, k 4*(lane/16)+i; B k 4*(lane/16)+i, column lane%16; C row 4*(lane/16)+i,
// column lane%16. wmma: A row lane%16, k i (lanes 16..31 repeat 0..15); B k i, column
// lane%16; C row 2i + lane/16, column lane%16.
template <Layout L = kLayout>
LW_DEVICE_INLINE constexpr int a_row(int lane, int i) {
  if constexpr (L == Layout::nvidia_m16n8k16) return (lane >> 2) + 8 * ((i >> 1) & 1);
  else return lane & 15;
}
template <Layout L = kLayout>
LW_DEVICE_INLINE constexpr int a_col(int lane, int i) {
  if constexpr (L == Layout::nvidia_m16n8k16) return 2 * (lane & 3) + (i & 1) + 8 * (i >> 2);
  else if constexpr (L == Layout::amd_mfma_16x16) return 4 * ((lane >> 4) & 3) + i;
  else return i;
}
template <Layout L = kLayout>
LW_DEVICE_INLINE constexpr int b_row(int lane, int i) {
  if constexpr (L == Layout::nvidia_m16n8k16) return 2 * (lane & 3) + (i & 1) + 8 * ((i >> 1) & 1);
  else if constexpr (L == Layout::amd_mfma_16x16) return 4 * ((lane >> 4) & 3) + i;
  else return i;
}
template <Layout L = kLayout>
LW_DEVICE_INLINE constexpr int b_col(int lane, int i) {
  if constexpr (L == Layout::nvidia_m16n8k16) return (lane >> 2) + 8 * (i >> 2);
  else return lane & 15;
}
template <Layout L = kLayout>
LW_DEVICE_INLINE constexpr int c_row(int lane, int i) {
  if constexpr (L == Layout::nvidia_m16n8k16) return (lane >> 2) + 8 * ((i >> 1) & 1);
  else if constexpr (L == Layout::amd_mfma_16x16) return 4 * ((lane >> 4) & 3) + i;
  else return 2 * i + ((lane >> 4) & 1);
}
template <Layout L = kLayout>
LW_DEVICE_INLINE constexpr int c_col(int lane, int i) {
  if constexpr (L == Layout::nvidia_m16n8k16) return 2 * (lane & 3) + (i & 1) + 8 * (i >> 2);
  else return lane & 15;
}
// The row slot (0 .. kRowSlots-1) of element i of C: elements of one slot share a row.
template <Layout L = kLayout>
LW_DEVICE_INLINE constexpr int c_slot(int i) {
  if constexpr (L == Layout::nvidia_m16n8k16) return (i >> 1) & 1;
  else return i;
}
// The row of slot s of the calling lane.
template <Layout L = kLayout>
LW_DEVICE_INLINE constexpr int slot_row(int lane, int s) {
  if constexpr (L == Layout::nvidia_m16n8k16) return (lane >> 2) + 8 * s;
  else if constexpr (L == Layout::amd_mfma_16x16) return 4 * ((lane >> 4) & 3) + s;
  else return 2 * s + ((lane >> 4) & 1);
}

// A's rows the same way: element i of a lane lies in row a_slot_row(lane, a_slot(i)), one of
// kARowSlots rows per lane (kernels address a row once per slot rather than once per element).
template <Layout L = kLayout>
LW_DEVICE_INLINE constexpr int a_slot(int i) {
  if constexpr (L == Layout::nvidia_m16n8k16) return (i >> 1) & 1;
  (void)i;
  return 0;
}
template <Layout L = kLayout>
LW_DEVICE_INLINE constexpr int a_slot_row(int lane, int s) {
  if constexpr (L == Layout::nvidia_m16n8k16) return (lane >> 2) + 8 * s;
  (void)s;
  return lane & 15;
}
#if defined(LW_TARGET_HOST)
namespace detail {
// Proof at compile time (in the host builds, whose compiler evaluates the accessors) that the
// slots name every element's row, in every layout.
template <Layout L>
constexpr bool row_slots_agree() {
  for (int lane = 0; lane < 64; ++lane) {
    for (int i = 0; i < Shape<L>::a; ++i)
      if (a_slot<L>(i) >= Shape<L>::a_row_slots || a_slot_row<L>(lane, a_slot<L>(i)) != a_row<L>(lane, i)) return false;
    for (int i = 0; i < Shape<L>::c; ++i)
      if (c_slot<L>(i) >= Shape<L>::row_slots || slot_row<L>(lane, c_slot<L>(i)) != c_row<L>(lane, i)) return false;
  }
  return true;
}
static_assert(row_slots_agree<Layout::nvidia_m16n8k16>() && row_slots_agree<Layout::amd_mfma_16x16>() &&
                  row_slots_agree<Layout::amd_wmma_16x16>(),
              "a row slot disagrees with the row accessors");
}  // namespace detail
#endif

template <class T>
struct FragA {
  T x[kA];
};
template <class T>
struct FragB {
  T x[kB];
};
struct FragC {
  float x[kC];
};

// mma_narrow() (below) computes only the first kNarrowCols columns of D, for products whose B
// has at most that many columns in use (few rows of x in a GEMV): on NVIDIA one m16n8k16 where
// mma() issues two; the AMD layouts have no narrower instruction and compute all 16.
inline constexpr int kNarrowCols = 8;
// The elements of C that mma_narrow computes: the first kNarrowC (the others are C's, unchanged).
inline constexpr int kNarrowC = kLayout == Layout::nvidia_m16n8k16 ? kC / 2 : kC;

LW_DEVICE_INLINE void fill(FragC& c, float v) {
#pragma unroll
  for (int i = 0; i < kC; ++i) c.x[i] = v;
}

// Loads through any pointer or checked shared view P indexable by element offset.
// A from a row-major [16][ld] tile: A(r, k) = src[r * ld + k].
template <class T, class P>
LW_DEVICE_INLINE void load_a(FragA<T>& a, const P& src, int ld) {
  const int lane = lane_id();
#pragma unroll
  for (int i = 0; i < kA; ++i) a.x[i] = src[a_row(lane, i) * ld + a_col(lane, i)];
}
// B from a row-major [16][ld] tile: B(k, n) = src[k * ld + n] (V in P.V).
template <class T, class P>
LW_DEVICE_INLINE void load_b(FragB<T>& b, const P& src, int ld) {
  const int lane = lane_id();
#pragma unroll
  for (int i = 0; i < kB; ++i) b.x[i] = src[b_row(lane, i) * ld + b_col(lane, i)];
}
// B from its transpose stored row-major: B(k, n) = src[n * ld + k] (K in Q.K^T).
template <class T, class P>
LW_DEVICE_INLINE void load_b_transposed(FragB<T>& b, const P& src, int ld) {
  const int lane = lane_id();
#pragma unroll
  for (int i = 0; i < kB; ++i) b.x[i] = src[b_col(lane, i) * ld + b_row(lane, i)];
}

// The same three loads from shared memory (16-byte aligned rows: ld a multiple of 8 elements,
// the tile's first element 16-byte aligned). On NVIDIA one ldmatrix each; elsewhere the loads
// above (on the emulator through its checked shared-memory views).
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
namespace detail {
template <bool Trans, class Frag>
LW_DEVICE_INLINE void ldmatrix_x4(Frag& f, const void* row_address) {
  static_assert(sizeof(f.x) == 16, "an ldmatrix.x4 fills eight 16-bit elements per lane");
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  uint32_t r[4];
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  }
  memcpy(f.x, r, sizeof(r));
}
}  // namespace detail
// Lane L names one row of the four 8x8 matrices (L / 8 picks the matrix); register r of the
// result is matrix r, which the orders below make the fragment's elements 2r and 2r + 1.
template <class T>
LW_DEVICE_INLINE void load_a_shared(FragA<T>& a, const T* src, int ld) {
  const int lane = lane_id(), j = lane >> 3;
  detail::ldmatrix_x4<false>(a, src + ((lane & 7) + 8 * (j & 1)) * ld + 8 * (j >> 1));
}
template <class T>
LW_DEVICE_INLINE void load_b_shared(FragB<T>& b, const T* src, int ld) {
  const int lane = lane_id(), j = lane >> 3;
  detail::ldmatrix_x4<true>(b, src + ((lane & 7) + 8 * (j & 1)) * ld + 8 * (j >> 1));
}
template <class T>
LW_DEVICE_INLINE void load_b_transposed_shared(FragB<T>& b, const T* src, int ld) {
  const int lane = lane_id(), j = lane >> 3;
  detail::ldmatrix_x4<false>(b, src + ((lane & 7) + 8 * (j >> 1)) * ld + 8 * (j & 1));
}
// B's first kNarrowCols columns for mma_narrow from the rows of its transpose, of which only the
// first `rows` (<= kNarrowCols) exist: B(k, n) = src[n * ld + k] for n < rows, else 0. On NVIDIA
// one ldmatrix.x2 whose lanes past `rows` read `zeros` (16 zero bytes of shared memory, 16-byte
// aligned); elsewhere the elements one by one (`zeros` is not read).
template <class T>
LW_DEVICE_INLINE void load_b_narrow_transposed_shared(FragB<T>& b, const T* src, int ld, int rows, const T* zeros) {
  const int lane = lane_id(), r = lane & 7;
  const T* row = r < rows ? src + r * ld + 8 * ((lane >> 3) & 1) : zeros;
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  uint32_t v[2];
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(v[0]), "=r"(v[1]) : "r"(addr));
  memcpy(b.x, v, sizeof(v));
#pragma unroll
  for (int i = 4; i < kB; ++i) b.x[i] = from_float<T>(0.0f);
}
#else
template <class T, class P>
LW_DEVICE_INLINE void load_a_shared(FragA<T>& a, const P& src, int ld) {
  load_a(a, src, ld);
}
template <class T, class P>
LW_DEVICE_INLINE void load_b_shared(FragB<T>& b, const P& src, int ld) {
  load_b(b, src, ld);
}
template <class T, class P>
LW_DEVICE_INLINE void load_b_transposed_shared(FragB<T>& b, const P& src, int ld) {
  load_b_transposed(b, src, ld);
}
template <class T, class P, class Z>
LW_DEVICE_INLINE void load_b_narrow_transposed_shared(FragB<T>& b, const P& src, int ld, int rows, const Z& zeros) {
  (void)zeros;
  const int lane = lane_id();
#pragma unroll
  for (int i = 0; i < kB; ++i) {
    const int col = b_col(lane, i);
    b.x[i] = col < rows && col < kNarrowCols ? static_cast<T>(src[col * ld + b_row(lane, i)]) : from_float<T>(0.0f);
  }
}
#endif

// The A fragment holding C's values (layouts where kCMatchesA only).
template <class T>
LW_DEVICE_INLINE FragA<T> c_as_a(const FragC& c) {
  static_assert(sizeof(T) == 2 && kCMatchesA, "this layout's C fragment is not an A fragment: stage it through shared memory");
  FragA<T> a;
#pragma unroll
  for (int i = 0; i < kA; ++i) a.x[i] = from_float<T>(c.x[i]);
  return a;
}

// Combines a value over the kRowLanes lanes that share its row (every lane must call it).
template <class Op>
LW_DEVICE_INLINE float reduce_row(float v, Op op) {
#pragma unroll
  for (int m = 1; m < kRowLanes; m *= 2) v = op(v, shfl_xor(v, m));
  return v;
}

#if defined(LW_TARGET_HOST)

namespace detail {

template <class T>
struct MmaOperands : lw::simt::MatrixOp {
  const FragA<T>* a;
  const FragB<T>* b;
  FragC* d;  // holds C on entry
};

// The whole warp's multiplication, once every lane has handed its fragments.
template <class T>
void run_mma(lw::simt::MatrixOp* const* lanes, int warp_size) {
  float A[16][16] = {}, B[16][16] = {};
  for (int l = 0; l < warp_size; ++l) {
    const auto* op = static_cast<const MmaOperands<T>*>(lanes[l]);
    if (!op) continue;
    for (int i = 0; i < kA; ++i) A[a_row(l, i)][a_col(l, i)] = to_float(op->a->x[i]);
    for (int i = 0; i < kB; ++i) B[b_row(l, i)][b_col(l, i)] = to_float(op->b->x[i]);
  }
  for (int l = 0; l < warp_size; ++l) {
    auto* op = static_cast<MmaOperands<T>*>(lanes[l]);
    if (!op) continue;
    for (int i = 0; i < kC; ++i) {
      const int r = c_row(l, i), n = c_col(l, i);
      float acc = op->d->x[i];
      for (int k = 0; k < 16; ++k) acc += A[r][k] * B[k][n];
      op->d->x[i] = acc;
    }
  }
}

}  // namespace detail

// d = a.b + c for the whole warp.
template <class T>
LW_SIMT_BUILTIN void mma(FragC& d, const FragA<T>& a, const FragB<T>& b, const FragC& c,
         std::source_location where = std::source_location::current()) {
  FragC acc = c;
  detail::MmaOperands<T> op;
  op.run = &detail::run_mma<T>;
  op.a = &a;
  op.b = &b;
  op.d = &acc;
  lw::simt::warp_matrix_op(&op, where);
  d = acc;
}

// D = A.B + C in D's first kNarrowCols columns; the others are unspecified (NaN here, so that
// a kernel that reads them fails on the emulator).
template <class T>
LW_SIMT_BUILTIN void mma_narrow(FragC& d, const FragA<T>& a, const FragB<T>& b, const FragC& c,
                                std::source_location where = std::source_location::current()) {
  mma(d, a, b, c, where);
  const int lane = lane_id();
#pragma unroll
  for (int i = 0; i < kC; ++i)
    if (c_col(lane, i) >= kNarrowCols) d.x[i] = __builtin_nanf("");
}

#else

namespace detail {
template <class T>
LW_DEVICE_INLINE uint32_t pack2(T lo, T hi) {
  return static_cast<uint32_t>(__builtin_bit_cast(uint16_t, lo)) |
         (static_cast<uint32_t>(__builtin_bit_cast(uint16_t, hi)) << 16);
}
}  // namespace detail

template <class T>
LW_DEVICE_INLINE void mma(FragC& d, const FragA<T>& a, const FragB<T>& b, const FragC& c) {
  static_assert(sizeof(T) == 2, "matrix fragments hold fp16 or bf16");
#if LW_MATRIX_CORES && (defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__))
#if defined(LW_TARGET_CUDA)
  const uint32_t ra[4] = {detail::pack2(a.x[0], a.x[1]), detail::pack2(a.x[2], a.x[3]), detail::pack2(a.x[4], a.x[5]),
                          detail::pack2(a.x[6], a.x[7])};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t rb0 = detail::pack2(b.x[4 * h], b.x[4 * h + 1]), rb1 = detail::pack2(b.x[4 * h + 2], b.x[4 * h + 3]);
    float* out = d.x + 4 * h;
    const float* in = c.x + 4 * h;
    if constexpr (std::is_same_v<T, __half>) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
          : "=f"(out[0]), "=f"(out[1]), "=f"(out[2]), "=f"(out[3])
          : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb0), "r"(rb1), "f"(in[0]), "f"(in[1]), "f"(in[2]),
            "f"(in[3]));
    } else {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
          : "=f"(out[0]), "=f"(out[1]), "=f"(out[2]), "=f"(out[3])
          : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb0), "r"(rb1), "f"(in[0]), "f"(in[1]), "f"(in[2]),
            "f"(in[3]));
    }
  }
#elif defined(LW_TARGET_HIP)
  using f4 = float __attribute__((ext_vector_type(4)));
  if constexpr (kLayout == Layout::amd_mfma_16x16) {
    f4 acc = {c.x[0], c.x[1], c.x[2], c.x[3]};
    if constexpr (std::is_same_v<T, __half>) {
      using h4 = _Float16 __attribute__((ext_vector_type(4)));
      h4 va, vb;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        va[i] = __builtin_bit_cast(_Float16, a.x[i]);
        vb[i] = __builtin_bit_cast(_Float16, b.x[i]);
      }
      acc = __builtin_amdgcn_mfma_f32_16x16x16f16(va, vb, acc, 0, 0, 0);
    } else {
      using s4 = short __attribute__((ext_vector_type(4)));
      s4 va, vb;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        va[i] = __builtin_bit_cast(short, a.x[i]);
        vb[i] = __builtin_bit_cast(short, b.x[i]);
      }
      acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(va, vb, acc, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) d.x[i] = acc[i];
  } else {
    using f8 = float __attribute__((ext_vector_type(8)));
    f8 acc;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = c.x[i];
    if constexpr (std::is_same_v<T, __half>) {
      using h16 = _Float16 __attribute__((ext_vector_type(16)));
      h16 va, vb;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        va[i] = __builtin_bit_cast(_Float16, a.x[i]);
        vb[i] = __builtin_bit_cast(_Float16, b.x[i]);
      }
      acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(va, vb, acc);
    } else {
      using s16 = short __attribute__((ext_vector_type(16)));
      s16 va, vb;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        va[i] = __builtin_bit_cast(short, a.x[i]);
        vb[i] = __builtin_bit_cast(short, b.x[i]);
      }
      acc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(va, vb, acc);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) d.x[i] = acc[i];
  }
#endif
#elif defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  // No matrix cores in this device compilation: kernels guard their bodies with
  // LW_MATRIX_CORES, so this is never reached.
  (void)a;
  (void)b;
  d = c;
  __trap();
#else
  // The host pass of nvcc or hipcc: no device code is generated here.
  (void)a;
  (void)b;
  d = c;
#endif
}

template <class T>
LW_DEVICE_INLINE void mma_narrow(FragC& d, const FragA<T>& a, const FragB<T>& b, const FragC& c) {
#if LW_MATRIX_CORES && defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__)
  const uint32_t ra[4] = {detail::pack2(a.x[0], a.x[1]), detail::pack2(a.x[2], a.x[3]), detail::pack2(a.x[4], a.x[5]),
                          detail::pack2(a.x[6], a.x[7])};
  const uint32_t rb0 = detail::pack2(b.x[0], b.x[1]), rb1 = detail::pack2(b.x[2], b.x[3]);
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d.x[0]), "=f"(d.x[1]), "=f"(d.x[2]), "=f"(d.x[3])
        : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb0), "r"(rb1), "f"(c.x[0]), "f"(c.x[1]), "f"(c.x[2]),
          "f"(c.x[3]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d.x[0]), "=f"(d.x[1]), "=f"(d.x[2]), "=f"(d.x[3])
        : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb0), "r"(rb1), "f"(c.x[0]), "f"(c.x[1]), "f"(c.x[2]),
          "f"(c.x[3]));
  }
#pragma unroll
  for (int i = 4; i < kC; ++i) d.x[i] = c.x[i];
#else
  mma(d, a, b, c);
#endif
}

#endif

}  // namespace lw::gpu::mma
