#include "kernels/embedding.h"

#include "gpu/launch.h"
#include "gpu/vector.h"

namespace lw::kernels {

namespace {

template <class T, class Id, int VEC>
__global__ void embedding_kernel(T* out, const T* table, const Id* ids, int64_t first, int64_t rows, int64_t hidden,
                                 int64_t* bad_token) {
  gpu::begin_after_prior_grid();
  const int64_t t = blockIdx.x;
  const int64_t id = static_cast<int64_t>(ids[t]) - first;
  const bool ok = id >= 0 && id < rows;
  if (!ok && bad_token && threadIdx.x == 0) atomicExch(reinterpret_cast<unsigned long long*>(bad_token), static_cast<unsigned long long>(t + 1));
  const T* src = table + (ok ? id : 0) * hidden;
  T* dst = out + t * hidden;
  const int64_t nvec = hidden / VEC;
  for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    gpu::Vec<T, VEC> v;
    if (ok) {
      v = gpu::load_vec<VEC>(src + i * VEC);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) v.v[j] = T(0.0f);
    }
    gpu::store_vec<VEC>(dst + i * VEC, v);
  }
}

}  // namespace

template <class T, class Id>
void embedding(T* out, const T* table, const Id* ids, int64_t tokens, int64_t first, int64_t rows, int64_t hidden,
               int64_t* bad_token, int warp_size, cudaStream_t stream) {
  if (tokens == 0 || hidden == 0) return;
  LW_CHECK(tokens <= 0x7fffffff, "embedding: " << tokens << " tokens exceed the grid limit");
  constexpr int V = gpu::kVecWidth<T>;
  const bool vec = hidden % V == 0 && gpu::aligned_to(gpu::kVectorBytes, out, table);
  const int64_t nvec = vec ? hidden / V : hidden;
  const int threads = gpu::round_block_size(static_cast<int>(nvec < 256 ? nvec : 256), warp_size);
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(tokens)), dim3(threads), 0, stream, gpu::kOverlapsPrior};
  if (vec) gpu::launch("embedding", embedding_kernel<T, Id, V>, cfg, out, table, ids, first, rows, hidden, bad_token);
  else gpu::launch("embedding", embedding_kernel<T, Id, 1>, cfg, out, table, ids, first, rows, hidden, bad_token);
}

#define LW_EMB(T, I) \
  template void embedding<T, I>(T*, const T*, const I*, int64_t, int64_t, int64_t, int64_t, int64_t*, int, cudaStream_t);
LW_EMB(float, int32_t)
LW_EMB(float, int64_t)
LW_EMB(half, int32_t)
LW_EMB(half, int64_t)
LW_EMB(bfloat16, int32_t)
LW_EMB(bfloat16, int64_t)
#undef LW_EMB

}  // namespace lw::kernels
