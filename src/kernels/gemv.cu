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

// A block holds `groups` groups of warps; each group computes R consecutive rows of w, its
// warps (slices) splitting k between them, and each lane strides over its slice with vector
// loads, U vectors of each row in flight before use. Each x vector is loaded once for all R
// rows: with several rows of x, reloading it per row would make the L1 cache, not DRAM, the
// limit; splitting k keeps enough warps in flight when R rows per group leave few groups.
// M is the compile-time bound on m. Every thread of the block calls it with the same m;
// partial is the block's shared [kWarpsPerBlock * R * M] floats.
template <class T, int M, int R, int U, int V, class Shared>
LW_DEVICE_INLINE void gemv_rows(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w,
                                const T* __restrict__ bias, int m, int64_t n, int64_t k, int64_t ldx, int64_t ldy,
                                int groups, Shared partial) {
  const int slices = static_cast<int>(blockDim.x / gpu::kWarpSize) / groups;
  const int warp = gpu::warp_id(), group = warp / slices, slice = warp % slices;
  const int lane = gpu::lane_id();
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * groups + group) * R;
  // A group past the end of w computes row 0 again (every warp must reach the barrier) and
  // drops it; rows past the end repeat the last row: loads stay in bounds.
  const int rows = row0 >= n ? 0 : n - row0 < R ? static_cast<int>(n - row0) : R;
  const T* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wr[r] = w + (rows == 0 ? 0 : row0 + (r < rows ? r : rows - 1)) * k;
  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < M; ++j) acc[r][j] = 0.0f;

  const int64_t nvec = k / V, step = static_cast<int64_t>(slices) * gpu::kWarpSize;
  int64_t i = static_cast<int64_t>(slice) * gpu::kWarpSize + lane;
  for (; i + (U - 1) * step < nvec; i += U * step) {
    gpu::Vec<T, V> wv[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = gpu::load_vec<V>(wr[r] + (i + u * step) * V);
#pragma unroll
    for (int u = 0; u < U; ++u) accumulate<M, R, V>(acc, wv[u], x + (i + u * step) * V, ldx, m);
  }
  for (; i < nvec; i += step) {
    gpu::Vec<T, V> wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = gpu::load_vec<V>(wr[r] + i * V);
    accumulate<M, R, V>(acc, wv, x + i * V, ldx, m);
  }
  // Elements past the last whole vector (k not a multiple of V).
  for (int64_t e = nvec * V + static_cast<int64_t>(slice) * gpu::kWarpSize + lane; e < k; e += step) {
#pragma unroll
    for (int j = 0; j < M; ++j) {
      if (j < m) {
        const float xf = gpu::to_float(x[j * ldx + e]);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][j] += gpu::to_float(wr[r][e]) * xf;
      }
    }
  }
  auto store = [&](int r, int j, float s) {
    if (j < m && r < rows) y[j * ldy + row0 + r] = gpu::from_float<T>(s + (bias ? gpu::to_float(bias[row0 + r]) : 0.0f));
  };
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < M; ++j) {
      const float s = gpu::warp_reduce_sum(acc[r][j]);
      if (lane == 0) {
        if (slices == 1) store(r, j, s);
        else partial[(warp * R + r) * M + j] = s;
      }
    }
  if (slices == 1) return;  // uniform over the block
  __syncthreads();
  // The slices' sums, added in a fixed order.
  const int t = threadIdx.x;
  if (t < groups * R * M) {
    const int g = t / (R * M), r = t / M % R, j = t % M;
    float s = 0.0f;
    for (int sl = 0; sl < slices; ++sl) s += partial[((g * slices + sl) * R + r) * M + j];
    const int64_t g_row0 = (static_cast<int64_t>(blockIdx.x) * groups + g) * R;
    const int g_rows = g_row0 >= n ? 0 : n - g_row0 < R ? static_cast<int>(n - g_row0) : R;
    if (j < m && r < g_rows) y[j * ldy + g_row0 + r] = gpu::from_float<T>(s + (bias ? gpu::to_float(bias[g_row0 + r]) : 0.0f));
  }
}

template <class T, int M, int R, int U, int V>
__global__ void gemv_kernel(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w,
                            const T* __restrict__ bias, int m, int64_t n, int64_t k, int64_t ldx, int64_t ldy,
                            int groups) {
  gpu::begin_after_prior_grid();
  LW_SHARED(float, partial, [kWarpsPerBlock * R * M]);
  gemv_rows<T, M, R, U, V>(y, x, w, bias, m, n, k, ldx, ldy, groups, partial);
}

// Grouped: blockIdx.y is the group, whose rows [offsets[z], offsets[z + 1]) of x and y meet its
// matrix w + z * n * k, M rows at a time (the later passes read the block's rows of w from cache).
template <class T, int M, int R, int U, int V>
__global__ void grouped_gemv_kernel(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w,
                                    const int32_t* __restrict__ offsets, int64_t n, int64_t k, int groups) {
  gpu::begin_after_prior_grid();
  LW_SHARED(float, partial, [kWarpsPerBlock * R * M]);
  const int z = blockIdx.y;
  const int64_t first = offsets[z], rows = offsets[z + 1] - first;
  const T* wz = w + static_cast<int64_t>(z) * n * k;
  for (int64_t r0 = 0; r0 < rows; r0 += M) {
    if (r0 > 0) __syncthreads();  // the previous pass's partial sums are read before they are overwritten
    const int m = rows - r0 < M ? static_cast<int>(rows - r0) : M;
    gemv_rows<T, M, R, U, V>(y + (first + r0) * n, x + (first + r0) * k, wz, static_cast<const T*>(nullptr), m, n, k, k,
                             n, groups, partial);
  }
}

// One x row: a warp per row of w (the most warps in flight). Several: four rows per group,
// which share their x loads, and four warps per group splitting k.
template <int M>
struct RowsShape {
  static constexpr int R = M == 1 ? 1 : 4;
  static constexpr int U = M == 1 ? 4 : 2;
  static constexpr int groups = M == 1 ? kWarpsPerBlock : kWarpsPerBlock / 4;
  static int64_t blocks(int64_t n) {
    const int64_t per_block = static_cast<int64_t>(groups) * R, b = (n + per_block - 1) / per_block;
    LW_CHECK(b <= 0x7fffffff, "gemv: " << n << " output columns exceed the grid limit");
    return b;
  }
};

template <class T, int M>
void launch_rows(T* y, const T* x, const T* w, const T* bias, int m, int64_t n, int64_t k, int64_t ldx, int64_t ldy,
                 int warp_size, cudaStream_t stream) {
  using S = RowsShape<M>;
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(S::blocks(n))), dim3(kWarpsPerBlock * warp_size), 0, stream,
                              gpu::kOverlapsPrior};
  constexpr int V = gpu::kVecWidth<T>;
  // Vector loads need every row of x and w to start on a 16-byte boundary.
  const bool vec = k % V == 0 && ldx % V == 0 && gpu::aligned_to(gpu::kVectorBytes, x, w);
  if (vec) gpu::launch("gemv", gemv_kernel<T, M, S::R, S::U, V>, cfg, y, x, w, bias, m, n, k, ldx, ldy, S::groups);
  else gpu::launch("gemv", gemv_kernel<T, M, S::R, S::U, 1>, cfg, y, x, w, bias, m, n, k, ldx, ldy, S::groups);
}

template <class T, int M>
void launch_grouped(T* y, const T* x, const T* w, const int32_t* offsets, int experts, int64_t n, int64_t k,
                    int warp_size, cudaStream_t stream) {
  using S = RowsShape<M>;
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(S::blocks(n)), static_cast<unsigned>(experts)),
                              dim3(kWarpsPerBlock * warp_size), 0, stream, gpu::kOverlapsPrior};
  constexpr int V = gpu::kVecWidth<T>;
  const bool vec = k % V == 0 && gpu::aligned_to(gpu::kVectorBytes, x, w);
  if (vec) gpu::launch("grouped_gemv", grouped_gemv_kernel<T, M, S::R, S::U, V>, cfg, y, x, w, offsets, n, k, S::groups);
  else gpu::launch("grouped_gemv", grouped_gemv_kernel<T, M, S::R, S::U, 1>, cfg, y, x, w, offsets, n, k, S::groups);
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

template <class T>
void grouped_gemv(T* y, const T* x, const T* w, const int32_t* offsets, int experts, int rows_per_pass, int64_t n,
                  int64_t k, int warp_size, cudaStream_t stream) {
  LW_CHECK(experts >= 0 && experts <= 65535, "grouped_gemv: " << experts << " groups; the grid takes at most 65535");
  LW_CHECK(rows_per_pass >= 1, "grouped_gemv: " << rows_per_pass << " rows per pass; at least 1");
  if (experts == 0 || n == 0) return;
  if (rows_per_pass == 1) launch_grouped<T, 1>(y, x, w, offsets, experts, n, k, warp_size, stream);
  else if (rows_per_pass == 2) launch_grouped<T, 2>(y, x, w, offsets, experts, n, k, warp_size, stream);
  else if (rows_per_pass <= 4) launch_grouped<T, 4>(y, x, w, offsets, experts, n, k, warp_size, stream);
  else if (rows_per_pass <= 8) launch_grouped<T, 8>(y, x, w, offsets, experts, n, k, warp_size, stream);
  else launch_grouped<T, 16>(y, x, w, offsets, experts, n, k, warp_size, stream);
}

#define LW_GEMV(T)                                                                                                     \
  template void gemv<T>(T*, const T*, const T*, const T*, int, int64_t, int64_t, int64_t, int64_t, int, cudaStream_t); \
  template void grouped_gemv<T>(T*, const T*, const T*, const int32_t*, int, int, int64_t, int64_t, int, cudaStream_t);
LW_GEMV(float)
LW_GEMV(half)
LW_GEMV(bfloat16)
#undef LW_GEMV

}  // namespace lw::kernels
