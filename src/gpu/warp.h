// Wave-agnostic warp primitives. Every helper takes a logical Width (default: the physical
// warp of the target) and is correct on any physical warp size >= Width: a Width-lane
// operation works within aligned Width-lane segments of the warp.
#pragma once
#include "gpu/compat.h"

namespace lw::gpu {

struct SumOp {
  template <class T>
  LW_DEVICE_INLINE T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <class T>
  LW_DEVICE_INLINE T operator()(T a, T b) const { return a > b ? a : b; }
};
struct MinOp {
  template <class T>
  LW_DEVICE_INLINE T operator()(T a, T b) const { return a < b ? a : b; }
};

LW_DEVICE_INLINE unsigned linear_thread_id() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
LW_DEVICE_INLINE unsigned block_threads() { return blockDim.x * blockDim.y * blockDim.z; }
// Lane and warp of the calling thread: warps take threads in linear order (x, then y, then z).
LW_DEVICE_INLINE int lane_id() { return static_cast<int>(linear_thread_id() % kWarpSize); }
LW_DEVICE_INLINE int warp_id() { return static_cast<int>(linear_thread_id() / kWarpSize); }

// The mask of every lane of the physical warp, and of its first `lanes` lanes, for CUDA's
// `_sync` intrinsics.
LW_DEVICE_INLINE unsigned long long full_warp_mask() { return kWarpSize == 64 ? ~0ull : 0xffffffffull; }
LW_DEVICE_INLINE unsigned long long first_lanes_mask(int lanes) {
  return lanes >= kWarpSize ? full_warp_mask() : (1ull << lanes) - 1ull;
}

// LW_WARP_SYNC(__shfl_xor, mask, args...): the `_sync` form with its mask on CUDA and HIP (whose
// compat_hip.h drops the mask); the unmasked form on the emulator, where, as on AMD hardware,
// every launched lane takes part: a warp of a block smaller than the warp has lanes that were
// never launched, which a full mask would name.
#if defined(LW_TARGET_HOST)
#define LW_WARP_SYNC(intrinsic, mask, ...) intrinsic(__VA_ARGS__)
#else
#define LW_WARP_SYNC(intrinsic, mask, ...) intrinsic##_sync(mask, __VA_ARGS__)
#endif

// Orders the shared-memory accesses of the lanes of a warp (all of them must call it): what one
// lane wrote before it, every lane reads after it.
LW_DEVICE_INLINE void sync_warp() {
#if defined(LW_TARGET_HIP)
  __syncwarp();
#else
  __syncwarp(full_warp_mask());
#endif
}

// Shuffles in which every lane of the physical warp takes part.
template <class T>
LW_DEVICE_INLINE T shfl_xor(T v, int lane_mask, int width = kWarpSize) {
  return LW_WARP_SYNC(__shfl_xor, full_warp_mask(), v, lane_mask, width);
}
template <class T>
LW_DEVICE_INLINE T shfl_idx(T v, int src_lane, int width = kWarpSize) {
  return LW_WARP_SYNC(__shfl, full_warp_mask(), v, src_lane, width);
}
// Whether `pred` holds on any lane of the warp (every lane must call it).
LW_DEVICE_INLINE bool warp_any(bool pred) { return LW_WARP_SYNC(__any, full_warp_mask(), pred) != 0; }
// A shuffle in which only the first `lanes` lanes of the warp take part.
template <class T>
LW_DEVICE_INLINE T shfl_idx_first_lanes(T v, int src_lane, int lanes) {
  return LW_WARP_SYNC(__shfl, first_lanes_mask(lanes), v, src_lane);
}

// Reduces each aligned Width-lane segment; every lane of the segment gets the result.
template <int Width = kWarpSize, class T, class Op>
LW_DEVICE_INLINE T warp_reduce(T v, Op op) {
  static_assert(Width > 0 && (Width & (Width - 1)) == 0, "warp reduction width must be a power of two");
#if defined(LW_DEVICE_CODE)
  static_assert(Width <= kWarpSize, "warp reduction width exceeds the physical warp size of this target");
#endif
#pragma unroll
  for (int offset = Width / 2; offset > 0; offset /= 2) v = op(v, shfl_xor(v, offset, Width));
  return v;
}
template <int Width = kWarpSize, class T>
LW_DEVICE_INLINE T warp_reduce_sum(T v) { return warp_reduce<Width>(v, SumOp{}); }
template <int Width = kWarpSize, class T>
LW_DEVICE_INLINE T warp_reduce_max(T v) { return warp_reduce<Width>(v, MaxOp{}); }
template <int Width = kWarpSize, class T>
LW_DEVICE_INLINE T warp_reduce_min(T v) { return warp_reduce<Width>(v, MinOp{}); }

// The value of lane `src` of the caller's Width-lane segment, in every lane of the segment.
template <int Width = kWarpSize, class T>
LW_DEVICE_INLINE T warp_broadcast(T v, int src) {
#if defined(LW_DEVICE_CODE)
  static_assert(Width <= kWarpSize, "broadcast width exceeds the physical warp size of this target");
#endif
  return shfl_idx(v, src, Width);
}

// Reduces the first `lanes` lanes of the warp (1 <= lanes <= warp size) into lane 0. Only
// those lanes may call it, so it serves a partly filled last warp of a block.
template <class T, class Op>
LW_DEVICE_INLINE T warp_reduce_first_lanes(T v, Op op, int lanes) {
  if (lanes == kWarpSize) return warp_reduce<kWarpSize>(v, op);
  const int lane = lane_id();
  int span = 1;
  while (span < lanes) span *= 2;
  for (int offset = span / 2; offset > 0; offset /= 2) {
    const int src = lane + offset;
    const T other = shfl_idx_first_lanes(v, src < lanes ? src : lane, lanes);
    if (src < lanes) v = op(v, other);
  }
  return v;
}

}  // namespace lw::gpu
