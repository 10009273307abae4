#include "kernels/gemv.h"

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"

namespace lw::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;

// acc[r][j] += w rows' vectors . x row j's vector at the same offset. Each element is widened
// to float once (not once per product), which keeps the kernel memory-bound up to M = 16.
template <int M, int R, int V, class T>
LW_DEVICE_INLINE void accumulate(float (&acc)[R][M], const gpu::Vec<T, V> (&wv)[R], const T* xp, int64_t ldx, int m) {
  float wf[R][V];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int e = 0; e < V; ++e) wf[r][e] = gpu::to_float(wv[r].v[e]);
#pragma unroll
  for (int j = 0; j < M; ++j) {
    if (j < m) {
      const gpu::Vec<T, V> xv = gpu::load_vec<V>(xp + j * ldx);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float xf = gpu::to_float(xv.v[e]);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][j] += wf[r][e] * xf;
      }
    }
  }
}

// One warp per R consecutive rows of w; each lane strides over k with vector loads, U vectors
// of each row in flight before use (enough independent loads to cover the memory latency),
// and each x vector loaded once for all R rows (with several rows of x, reloading it per row
// would make the L1 cache, not DRAM, the limit). M is the compile-time bound on m.
template <class T, int M, int R, int U, int V>
__global__ void gemv_kernel(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w,
                            const T* __restrict__ bias, int m, int64_t n, int64_t k, int64_t ldx, int64_t ldy) {
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (blockDim.x / gpu::kWarpSize) + gpu::warp_id()) * R;
  if (row0 >= n) return;  // the whole warp leaves together; the kernel has no block barrier
  const int rows = n - row0 < R ? static_cast<int>(n - row0) : R;
  const int lane = gpu::lane_id();
  // Rows past the end of w repeat the last row: loads stay in bounds, results are dropped.
  const T* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wr[r] = w + (row0 + (r < rows ? r : rows - 1)) * k;
  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < M; ++j) acc[r][j] = 0.0f;

  const int64_t nvec = k / V;
  int64_t i = lane;
  for (; i + (U - 1) * gpu::kWarpSize < nvec; i += U * gpu::kWarpSize) {
    gpu::Vec<T, V> wv[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = gpu::load_vec<V>(wr[r] + (i + u * gpu::kWarpSize) * V);
#pragma unroll
    for (int u = 0; u < U; ++u) accumulate<M, R, V>(acc, wv[u], x + (i + u * gpu::kWarpSize) * V, ldx, m);
  }
  for (; i < nvec; i += gpu::kWarpSize) {
    gpu::Vec<T, V> wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = gpu::load_vec<V>(wr[r] + i * V);
    accumulate<M, R, V>(acc, wv, x + i * V, ldx, m);
  }
  // Elements past the last whole vector (k not a multiple of V).
  for (int64_t e = nvec * V + lane; e < k; e += gpu::kWarpSize) {
#pragma unroll
    for (int j = 0; j < M; ++j) {
      if (j < m) {
        const float xf = gpu::to_float(x[j * ldx + e]);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][j] += gpu::to_float(wr[r][e]) * xf;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float b = bias && r < rows ? gpu::to_float(bias[row0 + r]) : 0.0f;
#pragma unroll
    for (int j = 0; j < M; ++j) {
      const float s = gpu::warp_reduce_sum(acc[r][j]);
      if (j < m && r < rows && lane == 0) y[j * ldy + row0 + r] = gpu::from_float<T>(s + b);
    }
  }
}

template <class T, int M>
void launch_rows(T* y, const T* x, const T* w, const T* bias, int m, int64_t n, int64_t k, int64_t ldx, int64_t ldy,
                 int warp_size, cudaStream_t stream) {
  // One row per warp for a single x row (the most warps in flight); four rows per warp, which
  // share their x loads, otherwise.
  constexpr int R = M == 1 ? 1 : 4;
  constexpr int U = M == 1 ? 4 : 2;
  const int64_t warps = (n + R - 1) / R;
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  LW_CHECK(blocks <= 0x7fffffff, "gemv: " << n << " output columns exceed the grid limit");
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(blocks)), dim3(kWarpsPerBlock * warp_size), 0, stream};
  constexpr int V = gpu::kVecWidth<T>;
  // Vector loads need every row of x and w to start on a 16-byte boundary.
  const bool vec = k % V == 0 && ldx % V == 0 && gpu::aligned_to(gpu::kVectorBytes, x, w);
  if (vec) gpu::launch("gemv", gemv_kernel<T, M, R, U, V>, cfg, y, x, w, bias, m, n, k, ldx, ldy);
  else gpu::launch("gemv", gemv_kernel<T, M, R, U, 1>, cfg, y, x, w, bias, m, n, k, ldx, ldy);
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
