#include "kernels/elementwise.h"

#include "gpu/launch.h"
#include "gpu/numeric.h"

namespace lw::kernels {

namespace {

template <class T>
__global__ void add_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = gpu::from_float<T>(gpu::to_float(a[i]) + gpu::to_float(b[i]));
  }
}

}  // namespace

template <class T>
void add(const T* a, const T* b, T* out, int64_t n, int warp_size, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = gpu::round_block_size(256, warp_size);
  const int64_t blocks_needed = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(blocks_needed < 65536 ? blocks_needed : 65536);
  gpu::launch("add", add_kernel<T>, {dim3(blocks), dim3(threads), 0, stream}, a, b, out, n);
}

template void add<float>(const float*, const float*, float*, int64_t, int, cudaStream_t);
template void add<half>(const half*, const half*, half*, int64_t, int, cudaStream_t);
template void add<bfloat16>(const bfloat16*, const bfloat16*, bfloat16*, int64_t, int, cudaStream_t);

}  // namespace lw::kernels
