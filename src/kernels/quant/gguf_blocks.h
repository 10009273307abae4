// GGML's quantised block formats (llama.cpp's ggml-common.h layouts) decoded on the device, 16
// consecutive elements at a time: every format's scales cover whole 16-element runs (the legacy
// formats' 32-element blocks split into their low- and high-nibble halves, the K-quants'
// 256-element super-blocks into 16 runs), so one decoder serves both the expansion kernel and the
// fused GEMV. Values are computed in fp32 in ggml's own order of operations, without contraction
// into FMAs, so they match ggml's dequantisation.
//
// Each format is a struct with kElems (elements per block), kBytes (bytes per block) and
//   decode16(block, run, out): out[i] = element 16 * run + i of the block, run < kElems / 16.
// Block payloads are byte streams whose fp16 fields are only 2-aligned: fields are assembled
// from bytes, except where a block's layout keeps 16-byte fields 16-aligned (Q4_K, Q5_K:
// load_16_bytes), whose loads are one instruction instead of sixteen.
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "gpu/numeric.h"
#include "gpu/portable_math.h"
#include "gpu/vector.h"

namespace lw::kernels::gguf {

constexpr int kRun = 16;  // elements one decode16 call produces

LW_DEVICE_INLINE float fp16_bits_to_float(uint32_t bits) {
  return gpu::to_float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffff)));
}

LW_DEVICE_INLINE float fp16_at(const uint8_t* p) { return fp16_bits_to_float(p[0] | (p[1] << 8)); }

LW_DEVICE_INLINE uint32_t u32_at(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

// a * b - c with both roundings (ggml's scalar code: a product, then a difference).
LW_DEVICE_INLINE float mul_sub(float a, float b, float c) { return gpu::mul_add_unfused(a, b, -c); }

// --- 32-element blocks: run 0 is the low nibbles of qs[0..16), run 1 the high nibbles --------

struct Q4_0 {
  static constexpr int kElems = 32, kBytes = 18;  // d, qs[16] (lint: not-a-warp)
  LW_DEVICE_INLINE static void decode16(const uint8_t* b, int run, float (&out)[kRun]) {
    const float d = fp16_at(b);
    const int shift = 4 * run;
#pragma unroll
    for (int i = 0; i < kRun; ++i) out[i] = static_cast<float>(((b[2 + i] >> shift) & 0x0f) - 8) * d;
  }
};

struct Q4_1 {
  static constexpr int kElems = 32, kBytes = 20;  // d, m, qs[16] (lint: not-a-warp)
  LW_DEVICE_INLINE static void decode16(const uint8_t* b, int run, float (&out)[kRun]) {
    const float d = fp16_at(b), m = fp16_at(b + 2);
    const int shift = 4 * run;
#pragma unroll
    for (int i = 0; i < kRun; ++i) out[i] = gpu::mul_add_unfused(static_cast<float>((b[4 + i] >> shift) & 0x0f), d, m);
  }
};

// The fifth bit of element 16 * run + i is bit 16 * run + i of qh.
struct Q5_0 {
  static constexpr int kElems = 32, kBytes = 22;  // d, qh[4], qs[16] (lint: not-a-warp)
  LW_DEVICE_INLINE static void decode16(const uint8_t* b, int run, float (&out)[kRun]) {
    const float d = fp16_at(b);
    const uint32_t qh = u32_at(b + 2) >> (kRun * run);
    const int shift = 4 * run;
#pragma unroll
    for (int i = 0; i < kRun; ++i) {
      const int q = ((b[6 + i] >> shift) & 0x0f) | (((qh >> i) & 1) << 4);
      out[i] = static_cast<float>(q - 16) * d;
    }
  }
};

struct Q5_1 {
  static constexpr int kElems = 32, kBytes = 24;  // d, m, qh[4], qs[16] (lint: not-a-warp)
  LW_DEVICE_INLINE static void decode16(const uint8_t* b, int run, float (&out)[kRun]) {
    const float d = fp16_at(b), m = fp16_at(b + 2);
    const uint32_t qh = u32_at(b + 4) >> (kRun * run);
    const int shift = 4 * run;
#pragma unroll
    for (int i = 0; i < kRun; ++i) {
      const int q = ((b[8 + i] >> shift) & 0x0f) | (((qh >> i) & 1) << 4);
      out[i] = gpu::mul_add_unfused(static_cast<float>(q), d, m);
    }
  }
};

struct Q8_0 {
  static constexpr int kElems = 32, kBytes = 34;  // d, qs[32] (signed) (lint: not-a-warp)
  LW_DEVICE_INLINE static void decode16(const uint8_t* b, int run, float (&out)[kRun]) {
    const float d = fp16_at(b);
#pragma unroll
    for (int i = 0; i < kRun; ++i) out[i] = static_cast<float>(static_cast<int8_t>(b[2 + kRun * run + i])) * d;
  }
};

// --- 256-element super-blocks (K-quants) -----------------------------------------------------

// Runs in halves of 128 elements: run r uses 2-bit field (r % 8) / 2 of bytes
// qs[32 * (r / 8) + 16 * (r % 2) + i], and its own 4-bit scale and min in scales[r].
struct Q2_K {
  static constexpr int kElems = 256, kBytes = 84;  // scales[16], qs[64], d, dmin
  LW_DEVICE_INLINE static void decode16(const uint8_t* b, int run, float (&out)[kRun]) {
    const float d = fp16_at(b + 80), dmin = fp16_at(b + 82);
    const uint8_t sc = b[run];
    const float dl = d * static_cast<float>(sc & 0x0f), ml = dmin * static_cast<float>(sc >> 4);
    const uint8_t* q = b + 16 + 32 * (run / 8) + 16 * (run % 2);  // lint: not-a-warp
    const int shift = 2 * ((run % 8) / 2);
#pragma unroll
    for (int i = 0; i < kRun; ++i) out[i] = mul_sub(dl, static_cast<float>((q[i] >> shift) & 3), ml);
  }
};

// As Q2_K for the low two bits; the third (set: no offset of -4) is bit 4 * (r / 8) + (r % 8) / 2
// of hmask[16 * (r % 2) + i]; 6-bit scales packed in 12 bytes, offset by 32.
struct Q3_K {
  static constexpr int kElems = 256, kBytes = 110;  // hmask[32], qs[64], scales[12], d
  LW_DEVICE_INLINE static void decode16(const uint8_t* b, int run, float (&out)[kRun]) {
    const uint8_t* s = b + 96;
    const int low = run < 8 ? (s[run] & 0x0f) : (s[run - 8] >> 4);
    const int high = (s[8 + run % 4] >> (2 * (run / 4))) & 3;
    const float dl = fp16_at(b + 108) * static_cast<float>((low | (high << 4)) - 32);  // lint: not-a-warp
    const int field = (run % 8) / 2, half = run / 8;
    const uint8_t* q = b + 32 + 32 * half + 16 * (run % 2);  // lint: not-a-warp
    const uint8_t* hm = b + 16 * (run % 2);
    const int bit = 4 * half + field;
#pragma unroll
    for (int i = 0; i < kRun; ++i) {
      const int v = ((q[i] >> (2 * field)) & 3) - (((hm[i] >> bit) & 1) ? 0 : 4);
      out[i] = dl * static_cast<float>(v);
    }
  }
};

// Q4_K and Q5_K: d and dmin, then eight 32-element sub-blocks' 6-bit scales and mins packed in
// 12 bytes; sub-block j's step dl = d * scale and offset ml = dmin * min. `head` is the block's
// first 16 bytes as four little-endian words (d | dmin << 16, then scales[0..12)).
LW_DEVICE_INLINE void sub_block_k4(const uint32_t (&head)[4], int j, float& dl, float& ml) {
  // Byte i of scales[] (i < 12), from registers: no indexed array, so no local memory.
  auto sb = [&](int i) {
    const uint32_t word = i < 4 ? head[1] : i < 8 ? head[2] : head[3];
    return static_cast<int>((word >> (8 * (i % 4))) & 0xff);
  };
  int sc, m;
  if (j < 4) {
    sc = sb(j) & 63;
    m = sb(j + 4) & 63;
  } else {
    sc = (sb(j + 4) & 0x0f) | ((sb(j - 4) >> 6) << 4);
    m = (sb(j + 4) >> 4) | ((sb(j) >> 6) << 4);
  }
  dl = fp16_bits_to_float(head[0]) * static_cast<float>(sc);
  ml = fp16_bits_to_float(head[0] >> 16) * static_cast<float>(m);
}

// The 16 bytes at p as four little-endian words: one 16-byte load where p is 16-aligned (the
// K-quants of 144- and 176-byte blocks in a 16-aligned matrix: each block and each 16-byte
// field of it), else byte by byte.
LW_DEVICE_INLINE void load_16_bytes(const uint8_t* p, uint32_t (&out)[4]) {
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    const gpu::Vec<uint32_t, 4> v = gpu::load_vec<4>(reinterpret_cast<const uint32_t*>(p));
#pragma unroll
    for (int w = 0; w < 4; ++w) out[w] = v.v[w];
  } else {
#pragma unroll
    for (int w = 0; w < 4; ++w) out[w] = u32_at(p + 4 * w);
  }
}

// Byte i of four words (i a constant after unrolling).
LW_DEVICE_INLINE int byte_of(const uint32_t (&words)[4], int i) {
  return static_cast<int>((words[i / 4] >> (8 * (i % 4))) & 0xff);
}

// Sub-block j (runs 2j, 2j + 1) is nibble j % 2 of qs[32 * (j / 2) + 16 * (r % 2) + i].
struct Q4_K {
  static constexpr int kElems = 256, kBytes = 144;  // d, dmin, scales[12], qs[128]
  LW_DEVICE_INLINE static void decode16(const uint8_t* b, int run, float (&out)[kRun]) {
    const int j = run / 2;
    uint32_t head[4], q[4];
    load_16_bytes(b, head);
    load_16_bytes(b + 16 + 32 * (j / 2) + 16 * (run % 2), q);  // lint: not-a-warp
    float dl, ml;
    sub_block_k4(head, j, dl, ml);
    const int shift = 4 * (j % 2);
#pragma unroll
    for (int i = 0; i < kRun; ++i) out[i] = mul_sub(dl, static_cast<float>((byte_of(q, i) >> shift) & 0x0f), ml);
  }
};

// As Q4_K, with a fifth bit (+16) in bit j of qh[16 * (r % 2) + i].
struct Q5_K {
  static constexpr int kElems = 256, kBytes = 176;  // d, dmin, scales[12], qh[32], qs[128]
  LW_DEVICE_INLINE static void decode16(const uint8_t* b, int run, float (&out)[kRun]) {
    const int j = run / 2;
    uint32_t head[4], q[4], qh[4];
    load_16_bytes(b, head);
    load_16_bytes(b + 48 + 32 * (j / 2) + 16 * (run % 2), q);  // lint: not-a-warp
    load_16_bytes(b + 16 + 16 * (run % 2), qh);
    float dl, ml;
    sub_block_k4(head, j, dl, ml);
    const int shift = 4 * (j % 2);
#pragma unroll
    for (int i = 0; i < kRun; ++i) {
      const int v = ((byte_of(q, i) >> shift) & 0x0f) + (((byte_of(qh, i) >> j) & 1) << 4);
      out[i] = mul_sub(dl, static_cast<float>(v), ml);
    }
  }
};

// Halves of 128: quarter t = (r % 8) / 2 holds nibble t / 2 of ql[64 * half + 32 * (t % 2) + l]
// and bits 2t, 2t + 1 of qh[32 * half + l] (l = 16 * (r % 2) + i), offset by 32; int8 scales.
struct Q6_K {
  static constexpr int kElems = 256, kBytes = 210;  // ql[128], qh[64], scales[16], d
  LW_DEVICE_INLINE static void decode16(const uint8_t* b, int run, float (&out)[kRun]) {
    const int half = run / 8, t = (run % 8) / 2, l0 = 16 * (run % 2);
    const float dl = fp16_at(b + 208) * static_cast<float>(static_cast<int8_t>(b[192 + run]));
    const uint8_t* ql = b + 64 * half + 32 * (t % 2) + l0;  // lint: not-a-warp
    const uint8_t* qh = b + 128 + 32 * half + l0;  // lint: not-a-warp
    const int shift = 4 * (t / 2);
#pragma unroll
    for (int i = 0; i < kRun; ++i) {
      const int v = (((ql[i] >> shift) & 0x0f) | (((qh[i] >> (2 * t)) & 3) << 4)) - 32;  // lint: not-a-warp
      out[i] = dl * static_cast<float>(v);
    }
  }
};

}  // namespace lw::kernels::gguf
