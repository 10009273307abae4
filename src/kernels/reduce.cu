#include "kernels/reduce.h"

#include <cmath>

#include "gpu/block_reduce.h"
#include "gpu/launch.h"
#include "gpu/numeric.h"

namespace lw::kernels {

namespace {

constexpr int kPartials = 1024;  // blocks of the first tensor_reduce pass

LW_DEVICE_INLINE float identity(Reduce op) {
  return op == Reduce::sum || op == Reduce::absmax ? 0.0f : op == Reduce::max ? -INFINITY : INFINITY;
}
LW_DEVICE_INLINE float combine(Reduce op, float a, float b) {
  return op == Reduce::sum ? a + b : op == Reduce::min ? fminf(a, b) : fmaxf(a, b);
}
LW_DEVICE_INLINE float lift(Reduce op, float v) { return op == Reduce::absmax ? fabsf(v) : v; }
LW_DEVICE_INLINE float block_combine(Reduce op, float v) {
  return op == Reduce::sum ? gpu::block_reduce_sum(v) : op == Reduce::min ? gpu::block_reduce_min(v)
                                                                          : gpu::block_reduce_max(v);
}

template <class T>
__global__ void row_reduce_kernel(Reduce op, const T* x, float* out, int64_t cols, int64_t row_stride) {
  const T* row = x + static_cast<int64_t>(blockIdx.x) * row_stride;
  float acc = identity(op);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc = combine(op, acc, lift(op, gpu::to_float(row[c])));
  acc = block_combine(op, acc);
  if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

template <class T>
__global__ void partial_reduce_kernel(Reduce op, const T* x, int64_t n, float* partials) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  float acc = identity(op);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    acc = combine(op, acc, lift(op, gpu::to_float(x[i])));
  }
  acc = block_combine(op, acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void final_reduce_kernel(Reduce op, const float* partials, int count, float* out) {
  float acc = identity(op);
  for (int i = static_cast<int>(threadIdx.x); i < count; i += static_cast<int>(blockDim.x)) {
    acc = combine(op, acc, partials[i]);
  }
  acc = block_combine(op, acc);
  if (threadIdx.x == 0) *out = acc;
}

}  // namespace

template <class T>
void row_reduce(Reduce op, const T* x, float* out, int64_t rows, int64_t cols, int64_t row_stride, int warp_size,
                cudaStream_t stream) {
  if (rows == 0) return;
  LW_CHECK(rows <= 0x7fffffff, "row_reduce: " << rows << " rows exceed the grid limit");
  const int64_t want = cols < 1024 ? cols : 1024;
  const int threads = gpu::round_block_size(static_cast<int>(want), warp_size);
  gpu::launch("row_reduce", row_reduce_kernel<T>, {dim3(static_cast<unsigned>(rows)), dim3(threads), 0, stream}, op, x,
              out, cols, row_stride);
}

int tensor_reduce_partials() { return kPartials; }

template <class T>
void tensor_reduce(Reduce op, const T* x, int64_t n, float* partials, float* out, int warp_size, cudaStream_t stream) {
  const int threads = gpu::round_block_size(256, warp_size);
  const int64_t need = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(need < 1 ? 1 : need < kPartials ? need : kPartials);
  gpu::launch("tensor_reduce", partial_reduce_kernel<T>, {dim3(blocks), dim3(threads), 0, stream}, op, x, n, partials);
  gpu::launch("tensor_reduce_final", final_reduce_kernel, {dim3(1), dim3(gpu::round_block_size(1024, warp_size)), 0, stream},
              op, partials, blocks, out);
}

#define LW_REDUCE(T)                                                                                      \
  template void row_reduce<T>(Reduce, const T*, float*, int64_t, int64_t, int64_t, int, cudaStream_t);   \
  template void tensor_reduce<T>(Reduce, const T*, int64_t, float*, float*, int, cudaStream_t);
LW_REDUCE(float)
LW_REDUCE(half)
LW_REDUCE(bfloat16)
#undef LW_REDUCE

}  // namespace lw::kernels
