#include "kernels/norm.h"

#include "gpu/block_reduce.h"
#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "kernels/row_plan.h"

namespace lw::kernels {

namespace {

// Pass 1 reads the row (adding and storing the residual in the fused form) and reduces;
// the later passes re-read it, from the L1/L2 cache where the first pass left it. Keeping
// the row in registers instead was measured slower on the H200 (docs/PERFORMANCE.md): the
// registers it takes cut the rows in flight per multiprocessor.
template <class T, int VEC, bool Layer>
__global__ void norm_kernel(T* out, const T* x, const T* w, const T* b, T* residual, float eps, int64_t hidden) {
  gpu::begin_after_prior_grid();
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  const T* xr = x + base;
  T* rr = residual ? residual + base : nullptr;
  T* yr = out + base;
  const int nvec = static_cast<int>(hidden / VEC);
  const int step = static_cast<int>(blockDim.x);
  const int first = static_cast<int>(threadIdx.x);

  float sum = 0.0f;
  for (int i = first; i < nvec; i += step) {
    const int64_t off = static_cast<int64_t>(i) * VEC;
    const gpu::Vec<T, VEC> xv = gpu::load_vec<VEC>(xr + off);
    float v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = gpu::to_float(xv.v[j]);
    if (rr) {
      const gpu::Vec<T, VEC> rv = gpu::load_vec<VEC>(rr + off);
      gpu::Vec<T, VEC> nv;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        nv.v[j] = gpu::from_float<T>(v[j] + gpu::to_float(rv.v[j]));
        v[j] = gpu::to_float(nv.v[j]);  // normalise what is stored
      }
      gpu::store_vec<VEC>(rr + off, nv);
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) sum += Layer ? v[j] : v[j] * v[j];
  }
  const float inv_n = 1.0f / static_cast<float>(hidden);
  const T* src = rr ? rr : xr;  // what the later passes re-read

  float mean = 0.0f, rstd;
  if constexpr (Layer) {
    mean = gpu::block_reduce_sum(sum) * inv_n;
    float sq = 0.0f;
    for (int i = first; i < nvec; i += step) {
      const gpu::Vec<T, VEC> sv = gpu::load_vec<VEC>(src + static_cast<int64_t>(i) * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = gpu::to_float(sv.v[j]) - mean;
        sq += d * d;
      }
    }
    rstd = rsqrtf(gpu::block_reduce_sum(sq) * inv_n + eps);
  } else {
    rstd = rsqrtf(gpu::block_reduce_sum(sum) * inv_n + eps);
  }

  for (int i = first; i < nvec; i += step) {
    const int64_t off = static_cast<int64_t>(i) * VEC;
    const gpu::Vec<T, VEC> sv = gpu::load_vec<VEC>(src + off);
    const gpu::Vec<T, VEC> wv = gpu::load_vec<VEC>(w + off);
    gpu::Vec<T, VEC> bv;
    if constexpr (Layer) {
      if (b) bv = gpu::load_vec<VEC>(b + off);
    }
    gpu::Vec<T, VEC> yv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float v = gpu::to_float(sv.v[j]);
      if constexpr (Layer) {
        float y = (v - mean) * rstd * gpu::to_float(wv.v[j]);
        if (b) y += gpu::to_float(bv.v[j]);
        yv.v[j] = gpu::from_float<T>(y);
      } else {
        const float normed = gpu::to_float(gpu::from_float<T>(v * rstd));
        yv.v[j] = gpu::from_float<T>(normed * gpu::to_float(wv.v[j]));
      }
    }
    gpu::store_vec<VEC>(yr + off, yv);
  }
}

template <class T, bool Layer>
void launch_norm(T* out, const T* x, const T* w, const T* b, T* residual, float eps, int64_t rows, int64_t hidden,
                 int warp_size, cudaStream_t stream) {
  if (rows == 0 || hidden == 0) return;
  LW_CHECK(rows <= 0x7fffffff, "norm: " << rows << " rows exceed the grid limit");
  constexpr int V = gpu::kVecWidth<T>;
  const bool vec = hidden % V == 0 && gpu::aligned_to(gpu::kVectorBytes, out, x, w) &&
                   (!b || gpu::aligned_to(gpu::kVectorBytes, b)) && (!residual || gpu::aligned_to(gpu::kVectorBytes, residual));
  const int64_t nvec = vec ? hidden / V : hidden;
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(rows)), dim3(row_threads(nvec, rows, warp_size)), 0, stream,
                              gpu::kOverlapsPrior};
  const char* name = Layer ? "layer_norm" : "rms_norm";
  if (vec) gpu::launch(name, norm_kernel<T, V, Layer>, cfg, out, x, w, b, residual, eps, hidden);
  else gpu::launch(name, norm_kernel<T, 1, Layer>, cfg, out, x, w, b, residual, eps, hidden);
}

}  // namespace

template <class T>
void rms_norm(T* out, const T* x, const T* weight, T* residual, float eps, int64_t rows, int64_t hidden,
              int warp_size, cudaStream_t stream) {
  launch_norm<T, false>(out, x, weight, nullptr, residual, eps, rows, hidden, warp_size, stream);
}

template <class T>
void layer_norm(T* out, const T* x, const T* weight, const T* bias, T* residual, float eps, int64_t rows,
                int64_t hidden, int warp_size, cudaStream_t stream) {
  launch_norm<T, true>(out, x, weight, bias, residual, eps, rows, hidden, warp_size, stream);
}

#define LW_NORM(T)                                                                                       \
  template void rms_norm<T>(T*, const T*, const T*, T*, float, int64_t, int64_t, int, cudaStream_t);     \
  template void layer_norm<T>(T*, const T*, const T*, const T*, T*, float, int64_t, int64_t, int, cudaStream_t);
LW_NORM(float)
LW_NORM(half)
LW_NORM(bfloat16)
#undef LW_NORM

}  // namespace lw::kernels
