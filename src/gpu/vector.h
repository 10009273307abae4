// 16-byte vector loads and stores: the widest access one thread makes in one instruction on
// every target, and what memory-bound kernels need to approach the copy bandwidth.
#pragma once
#include <cstdint>
#include <type_traits>

#include "gpu/compat.h"

namespace lw::gpu {

inline constexpr int kVectorBytes = 16;
// Elements of T in one 16-byte vector (4 floats, 8 halves).
template <class T>
inline constexpr int kVecWidth = kVectorBytes / static_cast<int>(sizeof(T));

template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <int N, class T>
LW_DEVICE_INLINE Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}
template <int N, class T>
LW_DEVICE_INLINE void store_vec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

// A float another block of the same launch wrote (ordered before this read, e.g. by
// gpu::last_to_arrive): read from L2, past this multiprocessor's L1, which is not coherent with
// other blocks' writes.
LW_DEVICE_INLINE float load_from_other_block(const float* p) {
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__)
  return __ldcg(p);
#else
  return *p;
#endif
}

// Stores a vector at element `offset` of a plain pointer (one wide store) or of a checked
// shared-memory view of the emulator (element by element, so that each byte is checked).
template <int N, class P, class T>
LW_DEVICE_INLINE void store_vec_at(const P& dst, int64_t offset, const Vec<T, N>& v) {
  if constexpr (std::is_pointer_v<P>) {
    store_vec<N>(dst + offset, v);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) dst[offset + j] = v.v[j];
  }
}

// Loads a vector of T at element `offset` of a plain pointer (one wide load) or of a checked
// shared-memory view of the emulator (element by element, so that each element is checked).
template <int N, class T, class P>
LW_DEVICE_INLINE Vec<T, N> load_vec_at(const P& src, int64_t offset) {
  if constexpr (std::is_pointer_v<P>) {
    return load_vec<N>(static_cast<const T*>(src) + offset);
  } else {
    Vec<T, N> v;
#pragma unroll
    for (int j = 0; j < N; ++j) v.v[j] = src[offset + j];
    return v;
  }
}

// True when every pointer is aligned to `bytes`.
template <class... P>
inline bool aligned_to(int64_t bytes, const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0) && ...);
}

}  // namespace lw::gpu
