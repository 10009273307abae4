// Copies from global to shared memory that run in the background while the threads compute:
// cp.async on NVIDIA sm_80 and later; a plain copy elsewhere (where the waits are no-ops), so
// one kernel source serves every target. Usage: copy_16_async for each 16-byte piece
// (copy_16_async_or_zero where a piece may lie past the data, copy_4_async for a 4-byte
// element), then
// async_commit() closes a group; async_wait<N>() waits until at most N groups are in flight,
// then a __syncthreads() makes the data visible to the block.
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "gpu/vector.h"

namespace lw::gpu {

#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <class T>
LW_DEVICE_INLINE void copy_16_async(T* dst, int64_t offset, const T* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + offset));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
// The 16 bytes at src where `full`, else 16 zero bytes (src is then not read but must be a
// valid address): no branch around the copy.
template <class T>
LW_DEVICE_INLINE void copy_16_async_or_zero(T* dst, int64_t offset, const T* src, bool full) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + offset));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(full ? 16 : 0));
}
// One 4-byte element (a scale beside a tile); through L1, the only cache 4-byte copies take.
template <class T>
LW_DEVICE_INLINE void copy_4_async(T* dst, int64_t offset, const T* src) {
  static_assert(sizeof(T) == 4, "copy_4_async copies 4-byte elements");
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + offset));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}
LW_DEVICE_INLINE void async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
LW_DEVICE_INLINE void async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#else
template <class P, class T>
LW_DEVICE_INLINE void copy_16_async(const P& dst, int64_t offset, const T* src) {
  store_vec_at<kVecWidth<T>>(dst, offset, load_vec<kVecWidth<T>>(src));
}
template <class P, class T>
LW_DEVICE_INLINE void copy_16_async_or_zero(const P& dst, int64_t offset, const T* src, bool full) {
  constexpr int V = kVecWidth<T>;
  Vec<T, V> v;
  if (full) v = load_vec<V>(src);
  else __builtin_memset(&v, 0, sizeof(v));
  store_vec_at<V>(dst, offset, v);
}
template <class P, class T>
LW_DEVICE_INLINE void copy_4_async(const P& dst, int64_t offset, const T* src) {
  static_assert(sizeof(T) == 4, "copy_4_async copies 4-byte elements");
  dst[offset] = *src;
}
LW_DEVICE_INLINE void async_commit() {}
template <int N>
LW_DEVICE_INLINE void async_wait() {}
#endif

}  // namespace lw::gpu
