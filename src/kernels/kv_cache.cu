#include "kernels/kv_cache.h"

#include "gpu/launch.h"
#include "gpu/vector.h"

namespace lw::kernels {

namespace {

// One block per token; K and V rows of all heads copied with vectors.
template <class T, int VEC>
__global__ void kv_write_kernel(KvWriteArgs a, const T* k, const T* v, const int64_t* slots, T* k_cache, T* v_cache,
                                int64_t* bad_token) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot == -1) return;
  if (slot < 0 || slot >= a.num_slots) {
    if (threadIdx.x == 0) atomicExch(reinterpret_cast<unsigned long long*>(bad_token), static_cast<unsigned long long>(t + 1));
    return;
  }
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

}  // namespace

template <class T>
void kv_write(const KvWriteArgs& a, const T* k, const T* v, const int64_t* slot_mapping, T* k_cache, T* v_cache,
              int64_t* bad_token, int warp_size, cudaStream_t stream) {
  if (a.tokens == 0) return;
  LW_CHECK(a.tokens <= 0x7fffffff, "kv_write: " << a.tokens << " tokens exceed the grid limit");
  constexpr int V = gpu::kVecWidth<T>;
  const int64_t row = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  const bool vec = row % V == 0 && a.k_token_stride % V == 0 && a.v_token_stride % V == 0 &&
                   gpu::aligned_to(gpu::kVectorBytes, k, v, k_cache, v_cache);
  const int64_t work = vec ? row / V : row;
  const int threads = gpu::round_block_size(static_cast<int>(work < 256 ? work : 256), warp_size);
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(a.tokens)), dim3(threads), 0, stream};
  if (vec) gpu::launch("kv_write", kv_write_kernel<T, V>, cfg, a, k, v, slot_mapping, k_cache, v_cache, bad_token);
  else gpu::launch("kv_write", kv_write_kernel<T, 1>, cfg, a, k, v, slot_mapping, k_cache, v_cache, bad_token);
}

template void kv_write<float>(const KvWriteArgs&, const float*, const float*, const int64_t*, float*, float*, int64_t*,
                              int, cudaStream_t);
template void kv_write<half>(const KvWriteArgs&, const half*, const half*, const int64_t*, half*, half*, int64_t*, int,
                             cudaStream_t);
template void kv_write<bfloat16>(const KvWriteArgs&, const bfloat16*, const bfloat16*, const int64_t*, bfloat16*,
                                 bfloat16*, int64_t*, int, cudaStream_t);

}  // namespace lw::kernels
