#include "kernels/softmax.h"

#include <cmath>

#include "gpu/block_reduce.h"
#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "kernels/row_plan.h"

namespace lw::kernels {

namespace {

// Three passes over the row: the maximum, the sum of exponentials, the output; the second and
// third re-read the row from the L1/L2 cache. (An online single-pass maximum and sum was
// measured slower on the H200: its per-element rescaling costs more than the re-read.)
// A fully masked row (every value -inf) gives zeros, or -inf for the logarithm, never NaN.
template <class TOut, class TIn, int VEC>
__global__ void softmax_kernel(TOut* out, const TIn* x, float inv_temp, bool log_out, int64_t cols) {
  const TIn* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  TOut* yr = out + static_cast<int64_t>(blockIdx.x) * cols;
  const int nvec = static_cast<int>(cols / VEC);
  const int step = static_cast<int>(blockDim.x);
  const int first = static_cast<int>(threadIdx.x);

  float mx = -INFINITY;
  for (int i = first; i < nvec; i += step) {
    const gpu::Vec<TIn, VEC> xv = gpu::load_vec<VEC>(xr + static_cast<int64_t>(i) * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) mx = fmaxf(mx, gpu::to_float(xv.v[j]) * inv_temp);
  }
  mx = gpu::block_reduce_max(mx);
  const bool masked = mx == -INFINITY;
  const float shift = masked ? 0.0f : mx;  // exp(-inf - 0) = 0: no NaN from -inf - -inf

  float sum = 0.0f;
  for (int i = first; i < nvec; i += step) {
    const gpu::Vec<TIn, VEC> xv = gpu::load_vec<VEC>(xr + static_cast<int64_t>(i) * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) sum += __expf(gpu::to_float(xv.v[j]) * inv_temp - shift);
  }
  sum = gpu::block_reduce_sum(sum);
  const float inv_sum = masked ? 0.0f : 1.0f / sum;
  const float log_sum = masked ? 0.0f : logf(sum);

  for (int i = first; i < nvec; i += step) {
    const gpu::Vec<TIn, VEC> xv = gpu::load_vec<VEC>(xr + static_cast<int64_t>(i) * VEC);
    gpu::Vec<TOut, VEC> yv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float z = gpu::to_float(xv.v[j]) * inv_temp - shift;
      const float y = masked ? (log_out ? -INFINITY : 0.0f) : log_out ? z - log_sum : __expf(z) * inv_sum;
      yv.v[j] = gpu::from_float<TOut>(y);
    }
    gpu::store_vec<VEC>(yr + static_cast<int64_t>(i) * VEC, yv);
  }
}

}  // namespace

template <class TOut, class TIn>
void softmax(TOut* out, const TIn* x, float temperature, bool log, int64_t rows, int64_t cols, int warp_size,
             cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  LW_CHECK(rows <= 0x7fffffff, "softmax: " << rows << " rows exceed the grid limit");
  constexpr int V = gpu::kVecWidth<TIn> < gpu::kVecWidth<TOut> ? gpu::kVecWidth<TIn> : gpu::kVecWidth<TOut>;
  const bool vec = cols % V == 0 && gpu::aligned_to(gpu::kVectorBytes, out, x);
  const int64_t nvec = vec ? cols / V : cols;
  const float inv_temp = 1.0f / temperature;
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(rows)), dim3(row_threads(nvec, rows, warp_size)), 0, stream};
  if (vec) gpu::launch("softmax", softmax_kernel<TOut, TIn, V>, cfg, out, x, inv_temp, log, cols);
  else gpu::launch("softmax", softmax_kernel<TOut, TIn, 1>, cfg, out, x, inv_temp, log, cols);
}

#define LW_SOFTMAX(TO, TI) \
  template void softmax<TO, TI>(TO*, const TI*, float, bool, int64_t, int64_t, int, cudaStream_t);
LW_SOFTMAX(float, float)
LW_SOFTMAX(half, half)
LW_SOFTMAX(float, half)
LW_SOFTMAX(bfloat16, bfloat16)
LW_SOFTMAX(float, bfloat16)
#undef LW_SOFTMAX

}  // namespace lw::kernels
