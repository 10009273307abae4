// NVIDIA Hopper's warpgroup matrix multiply (wgmma.mma_async, sm_90a only): four warps (128
// threads) multiply a 64-row A by a B of N columns, 16 k at a time, B (and A, or A from
// registers) read straight from shared memory through 64-bit descriptors. A fast path beside
// the portable matrix-fragment layer (gpu/matrix_fragment.h), whose kernels are its oracle;
// nothing here compiles for HIP or the host.
//
// Shared tiles are kept in the 128-byte swizzled layout the descriptors name: rows of 64
// 16-bit elements (128 bytes), 8 rows to a 1024-byte atom, a tile's columns beyond 64 in
// further 64-column chunks of rows x 128 bytes; the 16-byte piece p of row r sits at piece
// p ^ (r % 8) of its row. The same layout serves a K-major operand (rows are M or N, the
// reduction runs along the row: Q and K of attention) and an MN-major one (rows are k, the
// row runs along N: V), so one loader fills both.
//
// The accumulator of m64nN (f32) gives warp w of the group rows 16w .. 16w + 15 and each lane
// the elements of N / 8 m16n8 C fragments, in the order of mma.sync's: N / 16 FragCs of the
// NVIDIA layout of gpu/matrix_fragment.h, so the attention tile code (softmax, output) runs on
// them unchanged; an A operand from registers is an m16n8k16 A fragment per warp.
#pragma once
#include <cstdint>
#include <type_traits>

#include "gpu/compat.h"
#include "gpu/matrix_fragment.h"

#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LW_WGMMA 1
#else
#define LW_WGMMA 0
#endif

namespace lw::gpu::wgmma {

inline constexpr int kThreads = 128;      // lint: not-a-warp (a warpgroup: four warps)
inline constexpr int kRowBytes = 128;     // a swizzled row
inline constexpr int kAtomBytes = 1024;   // 8 rows: the swizzle's period and its alignment

// Byte offset of 16-byte piece p (8 elements) of row r in a swizzled tile of `rows` rows.
LW_HOST_DEVICE constexpr uint32_t piece_offset(int r, int p, int rows) {
  return static_cast<uint32_t>((p >> 3) * rows * kRowBytes + r * kRowBytes + (((p & 7) ^ (r & 7)) << 4));
}

#if LW_WGMMA
// A shared-memory matrix descriptor: start address, leading and stride byte offsets (all in
// 16-byte units, 14 bits each), 128-byte swizzle (layout type 1, bits 62-63).
LW_DEVICE_INLINE uint64_t descriptor(uint32_t smem_addr, uint32_t leading_bytes, uint32_t stride_bytes) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
// A descriptor moved `bytes` (a multiple of 16) further in shared memory: the start address
// field is the low 14 bits, in 16-byte units, and shared addresses stay below 2^18.
LW_DEVICE_INLINE uint64_t advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }
// K-major operand (A, or B of A.B^T) of a swizzled tile at `tile` (1024-byte aligned): the
// descriptor of its k elements 0 .. 15 (the leading offset is ignored by swizzled K-major
// layouts; 8-row atoms are 1024 bytes apart); k_major_offset(rows, k0) moves it to k0 .. k0 + 15 (k0 a
// multiple of 16) of a tile of `rows` rows.
LW_DEVICE_INLINE uint64_t k_major(uint32_t tile) { return descriptor(tile, kRowBytes, kAtomBytes); }
LW_HOST_DEVICE constexpr uint32_t k_major_offset(int rows, int k0) {
  return static_cast<uint32_t>((k0 >> 6) * rows * kRowBytes + (k0 & 63) * 2);
}
// MN-major B (rows of the tile are k, columns N) of a tile of `rows` rows: the descriptor of its
// rows 0 .. 15; mn_major_offset(r0) moves it to rows r0 .. r0 + 15 (r0 a multiple of 16).
LW_DEVICE_INLINE uint64_t mn_major(uint32_t tile, int rows) {
  return descriptor(tile, static_cast<uint32_t>(rows * kRowBytes), kAtomBytes);
}
LW_HOST_DEVICE constexpr uint32_t mn_major_offset(int r0) { return static_cast<uint32_t>(r0 * kRowBytes); }

LW_DEVICE_INLINE void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
LW_DEVICE_INLINE void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
LW_DEVICE_INLINE void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Writes of the generic proxy (st.shared, cp.async) made visible to wgmma's reads: each writer
// after its writes, before the barrier that precedes the multiply.
LW_DEVICE_INLINE void fence_shared_writes() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accesses of accumulator registers across an asynchronous
// multiply (before its issue, after its wait).
template <int N>
LW_DEVICE_INLINE void pin(mma::FragC (&c)[N]) {
#pragma unroll
  for (int f = 0; f < N; ++f) {
#pragma unroll
    for (int i = 0; i < mma::kC; ++i) asm volatile("" : "+f"(c[f].x[i])::"memory");
  }
}

// An A fragment (gpu/matrix_fragment.h's NVIDIA layout: element pairs 0-1, 2-3, 4-5, 6-7) as the
// four 32-bit registers a multiply from registers reads. Fill them before the fence that
// precedes their multiply; a set that an issued multiply may still read is rewritten only after
// a wait for it (wgmma.wait_group), else the compiler inserts that wait itself.
struct RegsA {
  uint32_t r[4];
};

#define LW_WG_R8(i) "+f"(d[(i) / 8].x[(i) % 8]), "+f"(d[(i + 1) / 8].x[(i + 1) % 8]), "+f"(d[(i + 2) / 8].x[(i + 2) % 8]), \
    "+f"(d[(i + 3) / 8].x[(i + 3) % 8]), "+f"(d[(i + 4) / 8].x[(i + 4) % 8]), "+f"(d[(i + 5) / 8].x[(i + 5) % 8]),        \
    "+f"(d[(i + 6) / 8].x[(i + 6) % 8]), "+f"(d[(i + 7) / 8].x[(i + 7) % 8])
#define LW_WG_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define LW_WG_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
    "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// The instructions' element type for T (bf16 or f16), spelt into the asm below.
#define LW_WG_MMA(TYPE, SHAPE) "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " "

// d (64 x 64, four FragCs per warp) = A.B (+ d where accumulate): A K-major in shared memory
// (descriptor a), B K-major (descriptor b: B's rows are its N columns).
template <class T>
LW_DEVICE_INLINE void mma_64x64_ss(mma::FragC (&d)[4], uint64_t a, uint64_t b, bool accumulate) {
  const int scale_d = accumulate ? 1 : 0;
#define LW_WG_SS(TYPE)                                                                                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" LW_WG_MMA(TYPE, "m64n64k16") LW_WG_D32              \
               ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                                                  \
               : LW_WG_R8(0), LW_WG_R8(8), LW_WG_R8(16), LW_WG_R8(24)                                             \
               : "l"(a), "l"(b), "r"(scale_d))
  if constexpr (std::is_same_v<T, bfloat16>) LW_WG_SS("bf16");
  else LW_WG_SS("f16");
#undef LW_WG_SS
}

// d (64 x N, N / 16 FragCs per warp) += A.B: A from registers (the warp's 16 x 16 A fragment
// as RegsA), B MN-major in shared memory (descriptor b). N: 64, 128.
template <class T, int N>
LW_DEVICE_INLINE void mma_rs_mn(mma::FragC (&d)[N / 16], const RegsA& a, uint64_t b) {
  static_assert(N == 64 || N == 128, "mma_rs_mn: N of 64 or 128");  // lint: not-a-warp
  const uint32_t a0 = a.r[0], a1 = a.r[1], a2 = a.r[2], a3 = a.r[3];
#define LW_WG_RS64(TYPE)                                                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" LW_WG_MMA(TYPE, "m64n64k16") LW_WG_D32              \
               ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                                    \
               : LW_WG_R8(0), LW_WG_R8(8), LW_WG_R8(16), LW_WG_R8(24)                                             \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1))
#define LW_WG_RS128(TYPE)                                                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" LW_WG_MMA(TYPE, "m64n128k16") LW_WG_D64             \
               ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                                    \
               : LW_WG_R8(0), LW_WG_R8(8), LW_WG_R8(16), LW_WG_R8(24), LW_WG_R8(32), LW_WG_R8(40), LW_WG_R8(48), \
                 LW_WG_R8(56)                                                                                     \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1))
  constexpr bool kBf16 = std::is_same_v<T, bfloat16>;
  if constexpr (N == 64) {  // lint: not-a-warp
    if constexpr (kBf16) LW_WG_RS64("bf16");
    else LW_WG_RS64("f16");
  } else {
    if constexpr (kBf16) LW_WG_RS128("bf16");
    else LW_WG_RS128("f16");
  }
#undef LW_WG_RS64
#undef LW_WG_RS128
}
// d (64 x N, N / 16 FragCs per warp) += A.B: A from registers (the warp's 16 x 16 A fragment
// as RegsA), B K-major in shared memory (descriptor b, as mma_64x64_ss's B: its rows are its N
// columns). N: 16, 32, 64.
template <class T, int N>
LW_DEVICE_INLINE void mma_rs_k(mma::FragC (&d)[N / 16], const RegsA& a, uint64_t b) {
  static_assert(N == 16 || N == 32 || N == 64, "mma_rs_k: N of 16, 32 or 64");  // lint: not-a-warp
  const uint32_t a0 = a.r[0], a1 = a.r[1], a2 = a.r[2], a3 = a.r[3];
#define LW_WG_RSK16(TYPE)                                                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n" LW_WG_MMA(TYPE, "m64n16k16")                      \
               "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"                      \
               : LW_WG_R8(0)                                                                                      \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1))
#define LW_WG_RSK32(TYPE)                                                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n" LW_WG_MMA(TYPE, "m64n32k16")                      \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, " \
               "p, 1, 1, 0;\n}\n"                                                                                 \
               : LW_WG_R8(0), LW_WG_R8(8)                                                                         \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1))
#define LW_WG_RSK64(TYPE)                                                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" LW_WG_MMA(TYPE, "m64n64k16") LW_WG_D32            \
               ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"                                                    \
               : LW_WG_R8(0), LW_WG_R8(8), LW_WG_R8(16), LW_WG_R8(24)                                             \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1))
  constexpr bool kBf16 = std::is_same_v<T, bfloat16>;
  if constexpr (N == 16) {
    if constexpr (kBf16) LW_WG_RSK16("bf16");
    else LW_WG_RSK16("f16");
  } else if constexpr (N == 32) {  // lint: not-a-warp
    if constexpr (kBf16) LW_WG_RSK32("bf16");
    else LW_WG_RSK32("f16");
  } else {
    if constexpr (kBf16) LW_WG_RSK64("bf16");
    else LW_WG_RSK64("f16");
  }
#undef LW_WG_RSK16
#undef LW_WG_RSK32
#undef LW_WG_RSK64
}
#undef LW_WG_MMA
#undef LW_WG_R8
#undef LW_WG_D32
#undef LW_WG_D64
#endif  // LW_WGMMA

}  // namespace lw::gpu::wgmma
