#include "kernels/reduce.h"

#include "gpu/block_reduce.h"
#include "gpu/launch.h"
#include "gpu/numeric.h"

namespace lw::kernels {

namespace {

template <class T>
__global__ void row_sum_kernel(const T* __restrict__ x, float* __restrict__ out, int64_t cols, int64_t row_stride) {
  const T* row = x + static_cast<int64_t>(blockIdx.x) * row_stride;
  float acc = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc += gpu::to_float(row[c]);
  acc = gpu::block_reduce_sum(acc);
  if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

}  // namespace

template <class T>
void row_sum(const T* x, float* out, int64_t rows, int64_t cols, int64_t row_stride, int warp_size,
             cudaStream_t stream) {
  if (rows == 0) return;
  LW_CHECK(rows <= 0x7fffffff, "row_sum: " << rows << " rows exceed the grid limit");
  const int64_t want = cols < 1024 ? cols : 1024;
  const int threads = gpu::round_block_size(static_cast<int>(want), warp_size);
  gpu::launch("row_sum", row_sum_kernel<T>, {dim3(static_cast<unsigned>(rows)), dim3(threads), 0, stream}, x, out, cols,
              row_stride);
}

template void row_sum<float>(const float*, float*, int64_t, int64_t, int64_t, int, cudaStream_t);
template void row_sum<half>(const half*, float*, int64_t, int64_t, int64_t, int, cudaStream_t);
template void row_sum<bfloat16>(const bfloat16*, float*, int64_t, int64_t, int64_t, int, cudaStream_t);

}  // namespace lw::kernels
