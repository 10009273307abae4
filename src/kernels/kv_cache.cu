#include "kernels/kv_cache.h"

#include "gpu/launch.h"
#include "gpu/vector.h"
#include "gpu/warp.h"

namespace lw::kernels {

namespace {

// Token t's slot, or -1 where it is skipped (-1) or outside the cache (reported in *bad_token
// where there is one).
LW_DEVICE_INLINE int64_t checked_slot(const KvWriteArgs& a, const int64_t* slots, int64_t t, int64_t* bad_token) {
  const int64_t slot = slots[t];
  if (slot == -1) return -1;
  if (slot < 0 || slot >= a.num_slots) {
    if (bad_token != nullptr && threadIdx.x == 0)
      atomicExch(reinterpret_cast<unsigned long long*>(bad_token), static_cast<unsigned long long>(t + 1));
    return -1;
  }
  return slot;
}

// One block per token; K and V rows of all heads copied with vectors.
template <class T, int VEC>
__global__ void kv_write_kernel(KvWriteArgs a, const T* k, const T* v, const int64_t* slots, T* k_cache, T* v_cache,
                                int64_t* bad_token) {
  gpu::begin_after_prior_grid();
  const int64_t t = blockIdx.x;
  const int64_t slot = checked_slot(a, slots, t, bad_token);
  if (slot < 0) return;
  const int64_t row = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  const T* ks = k + t * a.k_token_stride;
  const T* vs = v + t * a.v_token_stride;
  T* kd = k_cache + slot * row;
  T* vd = v_cache + slot * row;
  for (int64_t i = threadIdx.x; i < row / VEC; i += blockDim.x) {
    gpu::store_vec<VEC>(kd + i * VEC, gpu::load_vec<VEC>(ks + i * VEC));
    gpu::store_vec<VEC>(vd + i * VEC, gpu::load_vec<VEC>(vs + i * VEC));
  }
}

// One head row of D values (src) as codes C at dst. int8: the scale is the row's largest
// magnitude / 127, written to *scale by lane 0; e4m3: *scale is the head's, read.
template <class T, class C, int VEC>
LW_DEVICE_INLINE void encode_head(const T* src, C* dst, float* scale, int d) {
  const int lane = gpu::lane_id(), runs = d / VEC;
  float s;
  if constexpr (std::is_same_v<C, int8_t>) {
    float amax = 0.0f, nan = 0.0f;
    for (int r = lane; r < runs; r += gpu::kWarpSize) {
      const gpu::Vec<T, VEC> x = gpu::load_vec<VEC>(src + r * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float v = gpu::to_float(x.v[j]);
        amax = fmaxf(amax, fabsf(v));
        if (v != v) nan = 1.0f;
      }
    }
    amax = gpu::warp_reduce_max(amax);
    // A NaN in the row makes its scale NaN, so that it reads back as NaN, as from a bf16 cache.
    s = gpu::warp_reduce_max(nan) > 0.0f ? NAN : amax / 127.0f;
    if (lane == 0) *scale = s;
  } else {
    s = *scale;
  }
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int r = lane; r < runs; r += gpu::kWarpSize) {
    const gpu::Vec<T, VEC> x = gpu::load_vec<VEC>(src + r * VEC);
    gpu::Vec<C, VEC> c;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float y = gpu::to_float(x.v[j]) * inv;
      if constexpr (std::is_same_v<C, int8_t>) {
        c.v[j] = static_cast<int8_t>(fminf(127.0f, fmaxf(-127.0f, rintf(y))));
      } else {
        c.v[j] = fp8_e4m3_from_float(y);
      }
    }
    gpu::store_vec<VEC>(dst + r * VEC, c);
  }
}

// One block per token, a warp per key/value head (looping over heads): K and V encoded as C.
template <class T, class C, int VEC>
__global__ void kv_write_quantized_kernel(KvWriteArgs a, const T* k, const T* v, const int64_t* slots, C* k_cache,
                                          C* v_cache, KvScales scales, int64_t* bad_token) {
  gpu::begin_after_prior_grid();
  const int64_t t = blockIdx.x;
  const int64_t slot = checked_slot(a, slots, t, bad_token);
  if (slot < 0) return;
  const int d = a.head_dim;
  const int64_t row = static_cast<int64_t>(a.kv_heads) * d;
  const int warps = static_cast<int>(blockDim.x) / gpu::kWarpSize;
  for (int h = gpu::warp_id(); h < a.kv_heads; h += warps) {
    const int64_t at = kv_scale_index(scales, slot, h);
    encode_head<T, C, VEC>(k + t * a.k_token_stride + static_cast<int64_t>(h) * d, k_cache + slot * row + static_cast<int64_t>(h) * d,
                           scales.k + at, d);
    encode_head<T, C, VEC>(v + t * a.v_token_stride + static_cast<int64_t>(h) * d, v_cache + slot * row + static_cast<int64_t>(h) * d,
                           scales.v + at, d);
  }
}

}  // namespace

template <class T, class C>
void kv_write(const KvWriteArgs& a, const T* k, const T* v, const int64_t* slot_mapping, C* k_cache, C* v_cache,
              const KvScales& scales, int64_t* bad_token, int warp_size, cudaStream_t stream) {
  if (a.tokens == 0) return;
  LW_CHECK(a.tokens <= 0x7fffffff, "kv_write: " << a.tokens << " tokens exceed the grid limit");
  constexpr int V = gpu::kVecWidth<T>;
  const int64_t row = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  if constexpr (kQuantizedKv<T, C>) {
    // The codes of V elements take V bytes: aligned when the row offsets are multiples of V.
    const bool vec = a.head_dim % V == 0 && a.k_token_stride % V == 0 && a.v_token_stride % V == 0 &&
                     gpu::aligned_to(gpu::kVectorBytes, k, v) && gpu::aligned_to(V, k_cache, v_cache);
    const int threads = gpu::round_block_size(a.kv_heads * warp_size < 256 ? a.kv_heads * warp_size : 256, warp_size);
    const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(a.tokens)), dim3(threads), 0, stream, gpu::kOverlapsPrior};
    if (vec) {
      gpu::launch("kv_write", kv_write_quantized_kernel<T, C, V>, cfg, a, k, v, slot_mapping, k_cache, v_cache, scales,
                  bad_token);
    } else {
      gpu::launch("kv_write", kv_write_quantized_kernel<T, C, 1>, cfg, a, k, v, slot_mapping, k_cache, v_cache, scales,
                  bad_token);
    }
  } else {
    (void)scales;
    const bool vec = row % V == 0 && a.k_token_stride % V == 0 && a.v_token_stride % V == 0 &&
                     gpu::aligned_to(gpu::kVectorBytes, k, v, k_cache, v_cache);
    const int64_t work = vec ? row / V : row;
    const int threads = gpu::round_block_size(static_cast<int>(work < 256 ? work : 256), warp_size);
    const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(a.tokens)), dim3(threads), 0, stream, gpu::kOverlapsPrior};
    if (vec) gpu::launch("kv_write", kv_write_kernel<T, V>, cfg, a, k, v, slot_mapping, k_cache, v_cache, bad_token);
    else gpu::launch("kv_write", kv_write_kernel<T, 1>, cfg, a, k, v, slot_mapping, k_cache, v_cache, bad_token);
  }
}

#define LW_KV_WRITE(T, C)                                                                                        \
  template void kv_write<T, C>(const KvWriteArgs&, const T*, const T*, const int64_t*, C*, C*, const KvScales&, \
                               int64_t*, int, cudaStream_t);
#define LW_KV_WRITE_ALL(T) LW_KV_WRITE(T, T) LW_KV_WRITE(T, uint8_t) LW_KV_WRITE(T, int8_t)
LW_KV_WRITE_ALL(float)
LW_KV_WRITE_ALL(half)
LW_KV_WRITE_ALL(bfloat16)
#undef LW_KV_WRITE_ALL
#undef LW_KV_WRITE

}  // namespace lw::kernels
