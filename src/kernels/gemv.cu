#include "kernels/gemv.h"

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"

namespace lw::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;
// Vectors of w each lane has in flight before it uses them: enough independent loads to cover
// the memory latency with one warp per weight row.
constexpr int kUnroll = 4;

template <int V, class T>
LW_DEVICE_INLINE float dot_vec(const gpu::Vec<T, V>& a, const gpu::Vec<T, V>& b) {
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < V; ++j) s += gpu::to_float(a.v[j]) * gpu::to_float(b.v[j]);
  return s;
}

// One warp per row of w; each lane strides over k. M is the compile-time bound on m.
template <class T, int M, int V>
__global__ void gemv_kernel(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w,
                            const T* __restrict__ bias, int m, int64_t n, int64_t k, int64_t ldx, int64_t ldy) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / gpu::kWarpSize) + gpu::warp_id();
  if (row >= n) return;  // the whole warp leaves together; the kernel has no block barrier
  const int lane = gpu::lane_id();
  const T* wr = w + row * k;
  float acc[M];
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = 0.0f;

  const int64_t nvec = k / V;
  int64_t i = lane;
  for (; i + (kUnroll - 1) * gpu::kWarpSize < nvec; i += kUnroll * gpu::kWarpSize) {
    gpu::Vec<T, V> wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = gpu::load_vec<V>(wr + (i + u * gpu::kWarpSize) * V);
#pragma unroll
    for (int r = 0; r < M; ++r) {
      if (r < m) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) acc[r] += dot_vec<V>(wv[u], gpu::load_vec<V>(x + r * ldx + (i + u * gpu::kWarpSize) * V));
      }
    }
  }
  for (; i < nvec; i += gpu::kWarpSize) {
    const gpu::Vec<T, V> wv = gpu::load_vec<V>(wr + i * V);
#pragma unroll
    for (int r = 0; r < M; ++r)
      if (r < m) acc[r] += dot_vec<V>(wv, gpu::load_vec<V>(x + r * ldx + i * V));
  }
  // Elements past the last whole vector (k not a multiple of V).
  for (int64_t e = nvec * V + lane; e < k; e += gpu::kWarpSize) {
    const float wf = gpu::to_float(wr[e]);
#pragma unroll
    for (int r = 0; r < M; ++r)
      if (r < m) acc[r] += wf * gpu::to_float(x[r * ldx + e]);
  }
  const float b = bias ? gpu::to_float(bias[row]) : 0.0f;
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const float s = gpu::warp_reduce_sum(acc[r]);
    if (r < m && lane == 0) y[r * ldy + row] = gpu::from_float<T>(s + b);
  }
}

template <class T, int M>
void launch_rows(T* y, const T* x, const T* w, const T* bias, int m, int64_t n, int64_t k, int64_t ldx, int64_t ldy,
                 int warp_size, cudaStream_t stream) {
  const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  LW_CHECK(blocks <= 0x7fffffff, "gemv: " << n << " output columns exceed the grid limit");
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(blocks)), dim3(kWarpsPerBlock * warp_size), 0, stream};
  constexpr int V = gpu::kVecWidth<T>;
  // Vector loads need every row of x and w to start on a 16-byte boundary.
  const bool vec = k % V == 0 && ldx % V == 0 && gpu::aligned_to(gpu::kVectorBytes, x, w);
  if (vec) gpu::launch("gemv", gemv_kernel<T, M, V>, cfg, y, x, w, bias, m, n, k, ldx, ldy);
  else gpu::launch("gemv", gemv_kernel<T, M, 1>, cfg, y, x, w, bias, m, n, k, ldx, ldy);
}

}  // namespace

template <class T>
void gemv(T* y, const T* x, const T* w, const T* bias, int m, int64_t n, int64_t k, int64_t ldx, int64_t ldy,
          int warp_size, cudaStream_t stream) {
  LW_CHECK(m >= 0 && m <= kGemvMaxRows, "gemv: " << m << " rows; the kernel takes 0 to " << kGemvMaxRows);
  if (m == 0 || n == 0) return;
  if (m == 1) launch_rows<T, 1>(y, x, w, bias, m, n, k, ldx, ldy, warp_size, stream);
  else if (m == 2) launch_rows<T, 2>(y, x, w, bias, m, n, k, ldx, ldy, warp_size, stream);
  else if (m <= 4) launch_rows<T, 4>(y, x, w, bias, m, n, k, ldx, ldy, warp_size, stream);
  else if (m <= 8) launch_rows<T, 8>(y, x, w, bias, m, n, k, ldx, ldy, warp_size, stream);
  else launch_rows<T, 16>(y, x, w, bias, m, n, k, ldx, ldy, warp_size, stream);
}

#define LW_GEMV(T) template void gemv<T>(T*, const T*, const T*, const T*, int, int64_t, int64_t, int64_t, int64_t, int, cudaStream_t);
LW_GEMV(float)
LW_GEMV(half)
LW_GEMV(bfloat16)
#undef LW_GEMV

}  // namespace lw::kernels
