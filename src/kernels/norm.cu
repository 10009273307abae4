#include "kernels/norm.h"

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

// Loads the row (adding and storing the residual in the fused form) into registers when it
// fits (Cached), then reduces and normalises. The uncached form re-reads the row instead.
template <class T, int VEC, bool Cached, bool Layer>
__global__ void norm_kernel(T* out, const T* x, const T* w, const T* b, T* residual, float eps, int64_t hidden) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  const T* xr = x + base;
  T* rr = residual ? residual + base : nullptr;
  T* yr = out + base;
  const int nvec = static_cast<int>(hidden / VEC);
  const int step = static_cast<int>(blockDim.x);
  const int first = static_cast<int>(threadIdx.x);

  // Visits this thread's vectors; in the cached form the loop is unrolled so that the
  // register cache is indexed by constants (a run-time index would put it in local memory).
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
  float sum = 0.0f;
  each([&](int i, int k) {
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
    for (int j = 0; j < VEC; ++j) {
      sum += Layer ? v[j] : v[j] * v[j];
      if constexpr (Cached) cache[k][j] = v[j];
    }
  });
  const float inv_n = 1.0f / static_cast<float>(hidden);
  const T* src = rr ? rr : xr;  // what the uncached passes re-read

  // The row's values, from registers or re-read.
  auto values = [&](int i, int k, float (&v)[VEC]) {
    if constexpr (Cached) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = cache[k][j];
    } else {
      const gpu::Vec<T, VEC> sv = gpu::load_vec<VEC>(src + static_cast<int64_t>(i) * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = gpu::to_float(sv.v[j]);
    }
  };

  float mean = 0.0f, rstd;
  if constexpr (Layer) {
    mean = gpu::block_reduce_sum(sum) * inv_n;
    float sq = 0.0f;
    each([&](int i, int k) {
      float v[VEC];
      values(i, k, v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) sq += (v[j] - mean) * (v[j] - mean);
    });
    rstd = rsqrtf(gpu::block_reduce_sum(sq) * inv_n + eps);
  } else {
    rstd = rsqrtf(gpu::block_reduce_sum(sum) * inv_n + eps);
  }

  each([&](int i, int k) {
    const int64_t off = static_cast<int64_t>(i) * VEC;
    float v[VEC];
    values(i, k, v);
    const gpu::Vec<T, VEC> wv = gpu::load_vec<VEC>(w + off);
    gpu::Vec<T, VEC> bv;
    if constexpr (Layer) {
      if (b) bv = gpu::load_vec<VEC>(b + off);
    }
    gpu::Vec<T, VEC> yv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if constexpr (Layer) {
        float y = (v[j] - mean) * rstd * gpu::to_float(wv.v[j]);
        if (b) y += gpu::to_float(bv.v[j]);
        yv.v[j] = gpu::from_float<T>(y);
      } else {
        const float normed = gpu::to_float(gpu::from_float<T>(v[j] * rstd));
        yv.v[j] = gpu::from_float<T>(normed * gpu::to_float(wv.v[j]));
      }
    }
    gpu::store_vec<VEC>(yr + off, yv);
  });
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
  const RowPlan plan = row_plan(nvec, warp_size);
  const int threads = plan.threads;
  const bool cached = plan.cached;
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(rows)), dim3(threads), 0, stream};
  const char* name = Layer ? "layer_norm" : "rms_norm";
  if (vec && cached) gpu::launch(name, norm_kernel<T, V, true, Layer>, cfg, out, x, w, b, residual, eps, hidden);
  else if (vec) gpu::launch(name, norm_kernel<T, V, false, Layer>, cfg, out, x, w, b, residual, eps, hidden);
  else if (cached) gpu::launch(name, norm_kernel<T, 1, true, Layer>, cfg, out, x, w, b, residual, eps, hidden);
  else gpu::launch(name, norm_kernel<T, 1, false, Layer>, cfg, out, x, w, b, residual, eps, hidden);
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
