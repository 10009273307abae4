#include "kernels/softmax.h"

#include <cmath>

#include "gpu/block_reduce.h"
#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "kernels/row_plan.h"

namespace lw::kernels {

namespace {

// Vectors a thread keeps in registers between the passes. Launches give each thread up to
// this many, so the row is read from memory once and many bytes are in flight per SM.
constexpr int kCache = kRowCacheVectors;

template <class TOut, class TIn, int VEC, bool Cached>
__global__ void softmax_kernel(TOut* out, const TIn* x, float inv_temp, bool log_out, int64_t cols) {
  const TIn* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  TOut* yr = out + static_cast<int64_t>(blockIdx.x) * cols;
  const int nvec = static_cast<int>(cols / VEC);
  const int step = static_cast<int>(blockDim.x);
  const int first = static_cast<int>(threadIdx.x);

  auto each = [&](auto&& f) {
    if constexpr (Cached) {
#pragma unroll
      for (int k = 0; k < kCache; ++k) {
        const int i = first + k * step;
        if (i < nvec) f(i, k);
      }
    } else {
      for (int i = first; i < nvec; i += step) f(i, 0);
    }
  };
  float cache[Cached ? kCache : 1][VEC];
  auto values = [&](int i, int k, float (&v)[VEC]) {
    if constexpr (Cached) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = cache[k][j];
    } else {
      const gpu::Vec<TIn, VEC> xv = gpu::load_vec<VEC>(xr + static_cast<int64_t>(i) * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = gpu::to_float(xv.v[j]) * inv_temp;
    }
  };

  float mx = -INFINITY;
  each([&](int i, int k) {
    const gpu::Vec<TIn, VEC> xv = gpu::load_vec<VEC>(xr + static_cast<int64_t>(i) * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float v = gpu::to_float(xv.v[j]) * inv_temp;
      if constexpr (Cached) cache[k][j] = v;
      mx = fmaxf(mx, v);
    }
  });
  mx = gpu::block_reduce_max(mx);
  // A fully masked row: every value -inf. Shift by 0 so exp gives zeros, not NaN.
  const float shift = mx == -INFINITY ? 0.0f : mx;

  float sum = 0.0f;
  each([&](int i, int k) {
    float v[VEC];
    values(i, k, v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) sum += __expf(v[j] - shift);
  });
  sum = gpu::block_reduce_sum(sum);
  const float inv_sum = sum > 0.0f ? 1.0f / sum : 0.0f;
  const float log_sum = sum > 0.0f ? logf(sum) : 0.0f;

  each([&](int i, int k) {
    float v[VEC];
    values(i, k, v);
    gpu::Vec<TOut, VEC> yv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float y = log_out ? (sum > 0.0f ? v[j] - shift - log_sum : -INFINITY) : __expf(v[j] - shift) * inv_sum;
      yv.v[j] = gpu::from_float<TOut>(y);
    }
    gpu::store_vec<VEC>(yr + static_cast<int64_t>(i) * VEC, yv);
  });
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
  const RowPlan plan = row_plan(nvec, warp_size);
  const int threads = plan.threads;
  const bool cached = plan.cached;
  const float inv_temp = 1.0f / temperature;
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(rows)), dim3(threads), 0, stream};
  if (vec && cached) gpu::launch("softmax", softmax_kernel<TOut, TIn, V, true>, cfg, out, x, inv_temp, log, cols);
  else if (vec) gpu::launch("softmax", softmax_kernel<TOut, TIn, V, false>, cfg, out, x, inv_temp, log, cols);
  else if (cached) gpu::launch("softmax", softmax_kernel<TOut, TIn, 1, true>, cfg, out, x, inv_temp, log, cols);
  else gpu::launch("softmax", softmax_kernel<TOut, TIn, 1, false>, cfg, out, x, inv_temp, log, cols);
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
