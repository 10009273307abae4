#include "kernels/quant/gguf_gemv.h"

#include <type_traits>

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"
#include "kernels/quant/gguf_blocks.h"

namespace lw::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int R = kGgufGemvRowsPerPass;

// A warp per output column (row of W) and pass of R rows of x; its lanes take the row's
// 16-element runs in turn, decode each once and use it for every row of x.
template <class T, class Block, int V>
__global__ void gguf_gemv_kernel(T* __restrict__ y, const T* __restrict__ x, const uint8_t* __restrict__ w,
                                 const T* __restrict__ bias, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldy) {
  constexpr int kRunsPerBlock = Block::kElems / gguf::kRun;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * (blockDim.x / gpu::kWarpSize) + gpu::warp_id();
  if (col >= n) return;  // the whole warp: no collective is skipped by part of it
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * R;
  const int rows = m - row0 < R ? static_cast<int>(m - row0) : R;
  const uint8_t* wr = w + col * (k / Block::kElems) * Block::kBytes;
  const T* xr = x + row0 * ldx;
  float acc[R];
#pragma unroll
  for (int j = 0; j < R; ++j) acc[j] = 0.0f;

  const int64_t runs = k / gguf::kRun;
  for (int64_t r = gpu::lane_id(); r < runs; r += gpu::kWarpSize) {
    float wv[gguf::kRun];
    Block::decode16(wr + r / kRunsPerBlock * Block::kBytes, static_cast<int>(r % kRunsPerBlock), wv);
    if constexpr (!std::is_same_v<T, float>) {
#pragma unroll
      for (int i = 0; i < gguf::kRun; ++i) wv[i] = gpu::to_float(gpu::from_float<T>(wv[i]));
    }
#pragma unroll
    for (int j = 0; j < R; ++j) {
      if (j < rows) {
        const T* xp = xr + j * ldx + r * gguf::kRun;
#pragma unroll
        for (int c = 0; c < gguf::kRun; c += V) {
          const gpu::Vec<T, V> xv = gpu::load_vec<V>(xp + c);
#pragma unroll
          for (int e = 0; e < V; ++e) acc[j] += wv[c + e] * gpu::to_float(xv.v[e]);
        }
      }
    }
  }
  const float b = bias ? gpu::to_float(bias[col]) : 0.0f;
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const float s = gpu::warp_reduce_sum(acc[j]);
    if (gpu::lane_id() == 0 && j < rows) y[(row0 + j) * ldy + col] = gpu::from_float<T>(s + b);
  }
}

template <class T, class Block>
void launch_format(const char* name, T* y, const T* x, const void* w, const T* bias, int64_t m, int64_t n, int64_t k,
                   int64_t ldx, int64_t ldy, int warp_size, cudaStream_t stream) {
  const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock, passes = (m + R - 1) / R;
  LW_CHECK(blocks <= 0x7fffffff && passes <= 65535,
           "gguf_gemv: " << n << " output columns x " << m << " rows exceed the grid limits");
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(passes)),
                              dim3(kWarpsPerBlock * warp_size), 0, stream};
  constexpr int V = gpu::kVecWidth<T>;
  const auto* bytes = static_cast<const uint8_t*>(w);
  // Vector loads of x need its rows to start on a vector boundary (runs are 16 elements).
  if (ldx % V == 0 && gpu::aligned_to(gpu::kVectorBytes, x))
    gpu::launch(name, gguf_gemv_kernel<T, Block, V>, cfg, y, x, bytes, bias, m, n, k, ldx, ldy);
  else
    gpu::launch(name, gguf_gemv_kernel<T, Block, 1>, cfg, y, x, bytes, bias, m, n, k, ldx, ldy);
}

}  // namespace

template <class T>
void gguf_gemv(T* y, const T* x, const void* w, BlockFormat format, const T* bias, int64_t m, int64_t n, int64_t k,
               int64_t ldx, int64_t ldy, int warp_size, cudaStream_t stream) {
  LW_CHECK(is_quantized(format), "gguf_gemv: " << block_format_name(format) << " is not a quantised block format");
  LW_CHECK(m >= 0 && n >= 0 && k >= 0 && k % block_format_elems(format) == 0,
           "gguf_gemv: [M, N, K] = [" << m << ", " << n << ", " << k << "]: K must be whole "
                                      << block_format_name(format) << " blocks of " << block_format_elems(format));
  if (m == 0 || n == 0) return;
  auto run = [&]<class Block>(const char* name) {
    launch_format<T, Block>(name, y, x, w, bias, m, n, k, ldx, ldy, warp_size, stream);
  };
  switch (format) {
    case BlockFormat::q4_0: run.template operator()<gguf::Q4_0>("gguf_gemv_q4_0"); return;
    case BlockFormat::q4_1: run.template operator()<gguf::Q4_1>("gguf_gemv_q4_1"); return;
    case BlockFormat::q5_0: run.template operator()<gguf::Q5_0>("gguf_gemv_q5_0"); return;
    case BlockFormat::q5_1: run.template operator()<gguf::Q5_1>("gguf_gemv_q5_1"); return;
    case BlockFormat::q8_0: run.template operator()<gguf::Q8_0>("gguf_gemv_q8_0"); return;
    case BlockFormat::q2_k: run.template operator()<gguf::Q2_K>("gguf_gemv_q2_k"); return;
    case BlockFormat::q3_k: run.template operator()<gguf::Q3_K>("gguf_gemv_q3_k"); return;
    case BlockFormat::q4_k: run.template operator()<gguf::Q4_K>("gguf_gemv_q4_k"); return;
    case BlockFormat::q5_k: run.template operator()<gguf::Q5_K>("gguf_gemv_q5_k"); return;
    case BlockFormat::q6_k: run.template operator()<gguf::Q6_K>("gguf_gemv_q6_k"); return;
    default: break;
  }
  LW_FAIL("gguf_gemv: no kernel for " << block_format_name(format));
}

#define LW_GGUF_GEMV(T)                                                                                            \
  template void gguf_gemv<T>(T*, const T*, const void*, BlockFormat, const T*, int64_t, int64_t, int64_t, int64_t, \
                             int64_t, int, cudaStream_t);
LW_GGUF_GEMV(float)
LW_GGUF_GEMV(half)
LW_GGUF_GEMV(bfloat16)
#undef LW_GGUF_GEMV

}  // namespace lw::kernels
