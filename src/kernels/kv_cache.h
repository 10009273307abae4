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

// kv_load of the codes C at element `offset` of a plain pointer, or of a checked shared-memory
// view of the emulator (element by element, so that each byte is checked).
template <int N, class C, class P>
LW_DEVICE_INLINE void kv_load_at(const P& src, int64_t offset, float scale, float (&out)[N]) {
  if constexpr (std::is_pointer_v<P>) {
    kv_load<N>(static_cast<const C*>(src + offset), scale, out);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const C c = src[offset + i];
      if constexpr (std::is_same_v<C, uint8_t>) out[i] = fp8_e4m3_to_float(c) * scale;
      else if constexpr (std::is_same_v<C, int8_t>) out[i] = static_cast<float>(c) * scale;
      else out[i] = gpu::to_float(c);
    }
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
// [-1, num_slots) stores t + 1 in *bad_token instead of writing.
template <class T, class C>
void kv_write(const KvWriteArgs& a, const T* k, const T* v, const int64_t* slot_mapping, C* k_cache, C* v_cache,
              const KvScales& scales, int64_t* bad_token, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
