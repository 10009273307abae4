// The paged KV cache: per layer, K and V caches of [num_blocks, block_size, kv_heads, head_dim];
// token t of a sequence lives in slot block_table[t / block_size] * block_size + t % block_size.
//
// A cache holds the model's dtype T, or 8-bit codes C with f32 scales (KvScales):
//   uint8_t  e4m3fn (kernels/quant/fp8.h), value = code * scale of its key/value head;
//   int8_t   symmetric int8, value = code * scale of its (slot, head): the head's largest
//            magnitude / 127 at the time the token was written.
// Every attention kernel takes the cache element C as a template argument; kv_load (below)
// gives a run of it as floats.
#pragma once
#include <cstdint>
#include <type_traits>

#include "gpu/compat.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "kernels/quant/fp8.h"

namespace lw::kernels {

// The scales of an 8-bit cache: the scale of (slot, head) is k[slot * slot_stride + head]
// (slot_stride 0: one scale per head, as e4m3 caches have; kv_heads: per slot and head, as
// int8 caches have). Unused by caches in the model's dtype.
struct KvScales {
  float* k = nullptr;
  float* v = nullptr;
  int64_t slot_stride = 0;
};

template <class T, class C>
inline constexpr bool kQuantizedKv = !std::is_same_v<T, C>;

LW_HOST_DEVICE inline int64_t kv_scale_index(const KvScales& s, int64_t slot, int head) {
  return slot * s.slot_stride + head;
}

// N consecutive values of a cache row as floats: codes at p (N * sizeof(C) bytes, aligned to
// that), times `scale` for 8-bit codes. N is a multiple of 4 for 8-bit codes.
template <int N, class C>
LW_DEVICE_INLINE void kv_load(const C* p, float scale, float (&out)[N]) {
  if constexpr (std::is_same_v<C, uint8_t>) {
    const gpu::Vec<uint32_t, N / 4> w = gpu::load_vec<N / 4>(reinterpret_cast<const uint32_t*>(p));
    const float factor = scale * 0x1p60f;  // two steps of 2^60: the decode's 2^-120 without overflow
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = fp8_e4m3_times_2_pow_minus_120(w.v[i / 4], i % 4) * 0x1p60f * factor;
  } else if constexpr (std::is_same_v<C, int8_t>) {
    const gpu::Vec<int8_t, N> c = gpu::load_vec<N>(p);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = static_cast<float>(c.v[i]) * scale;
  } else {
    (void)scale;
    const gpu::Vec<C, N> c = gpu::load_vec<N>(p);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = gpu::to_float(c.v[i]);
  }
}

// Four codes (a 32-bit word, little-endian) as T without their scale: exact, since every e4m3
// and int8 value is an f16 and a bf16 value. NVIDIA sm_89+ converts e4m3 pairs to f16 in
// hardware; int8 goes through the mantissa of f16 (two per instruction) or fp32 (no
// int-to-float conversion, which runs at a quarter of the fp32 rate).
template <class T, class C>
LW_DEVICE_INLINE gpu::Vec<T, 4> kv_codes_as(uint32_t word) {
  gpu::Vec<T, 4> out;
  if constexpr (std::is_same_v<C, uint8_t>) {
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {
      const unsigned short codes = static_cast<unsigned short>(word >> (16 * pair));
      unsigned int h2;
      asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(codes));
      const __half lo = __ushort_as_half(static_cast<unsigned short>(h2 & 0xFFFFu));
      const __half hi = __ushort_as_half(static_cast<unsigned short>(h2 >> 16));
      if constexpr (std::is_same_v<T, half>) {
        out.v[2 * pair] = lo;
        out.v[2 * pair + 1] = hi;
      } else {
        out.v[2 * pair] = gpu::from_float<T>(__half2float(lo));
        out.v[2 * pair + 1] = gpu::from_float<T>(__half2float(hi));
      }
    }
#else
#pragma unroll
    for (int i = 0; i < 4; ++i) out.v[i] = gpu::from_float<T>(fp8_e4m3_times_2_pow_minus_120(word, i) * 0x1p60f * 0x1p60f);
#endif
  } else {
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__)
    constexpr bool kHalfPairs = std::is_same_v<T, half>;
#else
    constexpr bool kHalfPairs = false;
#endif
    if constexpr (kHalfPairs) {
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__)
      // Each code + 128 as the low byte of 1024 + (code + 128) in f16, less 1152: two per
      // instruction.
      const uint32_t biased = word ^ 0x80808080u;
      const __half2 bias = __float2half2_rn(1152.0f);
#pragma unroll
      for (int pair = 0; pair < 2; ++pair) {
        const uint32_t bits = __byte_perm(biased, 0x64646464u, pair == 0 ? 0x5140u : 0x7362u);
        const __half2 h = __hsub2(__halves2half2(__ushort_as_half(static_cast<unsigned short>(bits & 0xFFFFu)),
                                                 __ushort_as_half(static_cast<unsigned short>(bits >> 16))),
                                  bias);
        out.v[2 * pair] = __low2half(h);
        out.v[2 * pair + 1] = __high2half(h);
      }
#endif
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t biased = ((word >> (8 * i)) & 0xFFu) ^ 0x80u;  // code + 128
        out.v[i] = gpu::from_float<T>(__builtin_bit_cast(float, 0x4B000000u | biased) - 8388736.0f);
      }
    }
  }
  return out;
}

// Four 32-bit words at byte `offset` of a plain pointer to codes, or of a checked shared-memory
// view of the emulator (byte by byte, so that each byte is checked).
template <class C, class P>
LW_DEVICE_INLINE gpu::Vec<uint32_t, 4> kv_words_at(const P& src, int64_t offset) {
  if constexpr (std::is_pointer_v<P>) {
    return gpu::load_vec<4>(reinterpret_cast<const uint32_t*>(src + offset));
  } else {
    gpu::Vec<uint32_t, 4> w;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w.v[i] = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) w.v[i] |= static_cast<uint32_t>(static_cast<uint8_t>(C(src[offset + 4 * i + j]))) << (8 * j);
    }
    return w;
  }
}

struct KvWriteArgs {
  int64_t tokens;
  int kv_heads;
  int head_dim;
  int64_t k_token_stride;  // elements between tokens of k (>= kv_heads * head_dim)
  int64_t v_token_stride;
  int64_t num_slots;       // num_blocks * block_size
};

// k_cache/v_cache[slot_mapping[t]] = k[t], v[t], encoded as C with `scales` (KvScales; int8
// caches get each (slot, head)'s scale written, e4m3 caches read their per-head scales; values
// beyond 448 x the scale saturate); a slot of -1 skips the token (padding). A slot outside
// [-1, num_slots) is not written, and stores t + 1 in *bad_token where bad_token is not null.
template <class T, class C>
void kv_write(const KvWriteArgs& a, const T* k, const T* v, const int64_t* slot_mapping, C* k_cache, C* v_cache,
              const KvScales& scales, int64_t* bad_token, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
