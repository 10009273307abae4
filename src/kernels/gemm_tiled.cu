#include "kernels/gemm_tiled.h"

#include <type_traits>

#include "gpu/launch.h"
#include "gpu/numeric.h"

namespace lw::kernels {

namespace {

constexpr int kTileM = 64;  // lint: not-a-warp (tile rows)
constexpr int kTileN = 64;  // lint: not-a-warp (tile columns)
constexpr int kTileK = 16;
constexpr int kThreads = 256;  // 16 x 16 threads, each owns a 4 x 4 block of the C tile
constexpr int kPerThread = 4;

template <class Acc, class T>
LW_DEVICE_INLINE Acc to_acc(T v) {
  if constexpr (std::is_same_v<Acc, int32_t>) return static_cast<int32_t>(v);
  else return gpu::to_float(v);
}

template <class TA, class TC, class Acc>
__global__ void tiled_gemm_kernel(TiledGemmArgs<TA, TC> p) {
  LW_SHARED(Acc, a_tile, [kTileK * kTileM]);
  LW_SHARED(Acc, b_tile, [kTileK * kTileN]);
  const int z = blockIdx.z;
  int64_t row0 = 0, rows = p.m;
  const TA* a = p.a;
  TC* c = p.c;
  if (p.group_offsets) {
    row0 = p.group_offsets[z];
    rows = p.group_offsets[z + 1] - row0;
  } else {
    a += z * p.a_batch;
    c += z * p.c_batch;
  }
  const TA* b = p.b + z * p.b_batch;
  const int64_t tile_m = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int64_t tile_n = static_cast<int64_t>(blockIdx.x) * kTileN;
  if (tile_m >= rows) return;  // the whole block leaves before its first barrier

  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  Acc acc[kPerThread][kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) acc[i][j] = Acc(0);

  for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
    // Each thread stages 4 elements of each tile; out-of-range elements are zero.
#pragma unroll
    for (int e = 0; e < kTileK * kTileM / kThreads; ++e) {
      const int idx = tid + e * kThreads;
      const int kk = idx % kTileK, mm = idx / kTileK;
      const int64_t gm = tile_m + mm, gk = k0 + kk;
      a_tile[kk * kTileM + mm] = gm < rows && gk < p.k ? to_acc<Acc>(a[(row0 + gm) * p.a_row + gk * p.a_col]) : Acc(0);
      const int64_t gn = tile_n + mm;
      b_tile[kk * kTileN + mm] = gn < p.n && gk < p.k ? to_acc<Acc>(b[gn * p.b_row + gk * p.b_col]) : Acc(0);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      Acc av[kPerThread], bv[kPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) av[i] = a_tile[kk * kTileM + ty + 16 * i];
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) bv[j] = b_tile[kk * kTileN + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int64_t gm = tile_m + ty + 16 * i;
    if (gm >= rows) continue;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t gn = tile_n + tx + 16 * j;
      if (gn >= p.n) continue;
      float v = static_cast<float>(acc[i][j]) * p.alpha;
      if (p.row_scale) v *= p.row_scale[row0 + gm];
      if (p.col_scale) v *= p.col_scale[gn];
      if (p.bias) v += gpu::to_float(p.bias[gn]);
      c[(row0 + gm) * p.c_row + gn] = gpu::from_float<TC>(v);
    }
  }
}

template <class TC>
__global__ void scale_int32_kernel(TC* out, const int32_t* acc, const float* row_scale, const float* col_scale,
                                   const TC* bias, int64_t m, int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, col = i % n;
    float v = static_cast<float>(acc[i]) * row_scale[r] * col_scale[col];
    if (bias) v += gpu::to_float(bias[col]);
    out[i] = gpu::from_float<TC>(v);
  }
}

}  // namespace

template <class TA, class TC>
void tiled_gemm(const TiledGemmArgs<TA, TC>& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  using Acc = std::conditional_t<std::is_same_v<TA, int8_t>, int32_t, float>;
  const int64_t gx = (p.n + kTileN - 1) / kTileN, gy = (p.m + kTileM - 1) / kTileM;
  LW_CHECK(gx <= 0x7fffffff && gy <= 65535 && p.batch <= 65535,
           "tiled_gemm: " << p.m << "x" << p.n << " in " << p.batch << " batches exceeds the grid limits");
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(p.batch)),
                              dim3(kThreads), 0, stream};
  gpu::launch("tiled_gemm", tiled_gemm_kernel<TA, TC, Acc>, cfg, p);
}

template <class TC>
void scale_int32(TC* out, const int32_t* acc, const float* row_scale, const float* col_scale, const TC* bias,
                 int64_t m, int64_t n, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  const int64_t blocks = (m * n + 255) / 256;
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(blocks < 65536 ? blocks : 65536)), dim3(256), 0, stream};
  gpu::launch("scale_int32", scale_int32_kernel<TC>, cfg, out, acc, row_scale, col_scale, bias, m, n);
}

template void tiled_gemm<float, float>(const TiledGemmArgs<float, float>&, cudaStream_t);
template void tiled_gemm<half, half>(const TiledGemmArgs<half, half>&, cudaStream_t);
template void tiled_gemm<bfloat16, bfloat16>(const TiledGemmArgs<bfloat16, bfloat16>&, cudaStream_t);
template void tiled_gemm<int8_t, float>(const TiledGemmArgs<int8_t, float>&, cudaStream_t);
template void tiled_gemm<int8_t, half>(const TiledGemmArgs<int8_t, half>&, cudaStream_t);
template void tiled_gemm<int8_t, bfloat16>(const TiledGemmArgs<int8_t, bfloat16>&, cudaStream_t);
template void scale_int32<float>(float*, const int32_t*, const float*, const float*, const float*, int64_t, int64_t, cudaStream_t);
template void scale_int32<half>(half*, const int32_t*, const float*, const float*, const half*, int64_t, int64_t, cudaStream_t);
template void scale_int32<bfloat16>(bfloat16*, const int32_t*, const float*, const float*, const bfloat16*, int64_t, int64_t, cudaStream_t);

}  // namespace lw::kernels
