#include "kernels/quant/gguf_gemv.h"

#include <type_traits>

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"
#include "kernels/quant/fp8.h"
#include "kernels/quant/gguf_blocks.h"

namespace lw::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int R = kGgufGemvRowsPerPass;

// Where the kernel reads W: row(col) gives one row's reader, whose decode16(r, v) decodes its
// 16-element run r to fp32 (the row's address and scales found once per row).
template <class Block>
struct GgufRows {  // GGML blocks, row by row
  const uint8_t* w;
  int64_t k;
  struct Row {
    const uint8_t* p;
    LW_DEVICE_INLINE void decode16(int64_t r, float (&v)[gguf::kRun]) const {
      constexpr int kRunsPerBlock = Block::kElems / gguf::kRun;
      Block::decode16(p + r / kRunsPerBlock * Block::kBytes, static_cast<int>(r % kRunsPerBlock), v);
    }
  };
  LW_DEVICE_INLINE Row row(int64_t col) const { return {w + col * (k / Block::kElems) * Block::kBytes}; }
};
struct ScaledRows {  // 8-bit values with scales, 16 bytes per run
  ScaledMatrix m;
  struct Row {
    const uint8_t* p;
    const float* scales;  // the row's scale (tensor, row) or its row of block scales
    int64_t block_cols;   // 0 unless the scales are per block
    bool fp8;
    LW_DEVICE_INLINE void decode16(int64_t r, float (&v)[gguf::kRun]) const {
      const gpu::Vec<uint8_t, gguf::kRun> b = gpu::load_vec<gguf::kRun>(p + r * gguf::kRun);
#pragma unroll
      for (int i = 0; i < gguf::kRun; ++i) {
        const float scale = block_cols > 0 ? scales[(r * gguf::kRun + i) / block_cols] : scales[0];
        v[i] = (fp8 ? fp8_e4m3_to_float(b.v[i]) : static_cast<float>(static_cast<int8_t>(b.v[i]))) * scale;
      }
    }
  };
  LW_DEVICE_INLINE Row row(int64_t col) const {
    const auto* p = static_cast<const uint8_t*>(m.q) + col * m.cols;
    switch (m.layout) {
      case ScaleLayout::tensor: return {p, m.scales, 0, m.fp8};
      case ScaleLayout::row: return {p, m.scales + col, 0, m.fp8};
      default: return {p, m.scales + (col / m.block_rows) * ((m.cols + m.block_cols - 1) / m.block_cols), m.block_cols, m.fp8};
    }
  }
};

// A warp per output column (row of W) and pass of R rows of x; its lanes take the row's
// 16-element runs in turn, decode each once and use it for every row of x.
template <class T, class Source, int V>
__global__ void gemv_kernel(T* __restrict__ y, const T* __restrict__ x, Source w, const T* __restrict__ bias, int64_t m,
                            int64_t n, int64_t k, int64_t ldx, int64_t ldy) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * (blockDim.x / gpu::kWarpSize) + gpu::warp_id();
  if (col >= n) return;  // the whole warp: no collective is skipped by part of it
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * R;
  const int rows = m - row0 < R ? static_cast<int>(m - row0) : R;
  const T* xr = x + row0 * ldx;
  const auto wr = w.row(col);
  float acc[R];
#pragma unroll
  for (int j = 0; j < R; ++j) acc[j] = 0.0f;

  const int64_t runs = k / gguf::kRun;
  for (int64_t r = gpu::lane_id(); r < runs; r += gpu::kWarpSize) {
    float wv[gguf::kRun];
    wr.decode16(r, wv);
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

template <class T, class Source>
void launch_gemv(const char* name, T* y, const T* x, const Source& w, const T* bias, int64_t m, int64_t n, int64_t k,
                 int64_t ldx, int64_t ldy, int warp_size, cudaStream_t stream) {
  const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock, passes = (m + R - 1) / R;
  LW_CHECK(blocks <= 0x7fffffff && passes <= 65535,
           name << ": " << n << " output columns x " << m << " rows exceed the grid limits");
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(passes)),
                              dim3(kWarpsPerBlock * warp_size), 0, stream};
  constexpr int V = gpu::kVecWidth<T>;
  // Vector loads of x need its rows to start on a vector boundary (runs are 16 elements).
  if (ldx % V == 0 && gpu::aligned_to(gpu::kVectorBytes, x))
    gpu::launch(name, gemv_kernel<T, Source, V>, cfg, y, x, w, bias, m, n, k, ldx, ldy);
  else
    gpu::launch(name, gemv_kernel<T, Source, 1>, cfg, y, x, w, bias, m, n, k, ldx, ldy);
}

template <class T, class Block>
void launch_format(const char* name, T* y, const T* x, const void* w, const T* bias, int64_t m, int64_t n, int64_t k,
                   int64_t ldx, int64_t ldy, int warp_size, cudaStream_t stream) {
  launch_gemv(name, y, x, GgufRows<Block>{static_cast<const uint8_t*>(w), k}, bias, m, n, k, ldx, ldy, warp_size, stream);
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

template <class T>
void scaled_gemv(T* y, const T* x, const ScaledMatrix& w, const T* bias, int64_t m, int64_t ldx, int64_t ldy,
                 int warp_size, cudaStream_t stream) {
  LW_CHECK(m >= 0 && w.rows >= 0 && w.cols >= 0 && w.cols % gguf::kRun == 0,
           "scaled_gemv: [M, N, K] = [" << m << ", " << w.rows << ", " << w.cols << "]: K must be a multiple of "
                                        << gguf::kRun);
  LW_CHECK(w.layout != ScaleLayout::block || (w.block_rows > 0 && w.block_cols > 0),
           "scaled_gemv: scale blocks of " << w.block_rows << " x " << w.block_cols);
  LW_CHECK(gpu::aligned_to(gpu::kVectorBytes, w.q), "scaled_gemv: the weights must start 16-byte aligned");
  if (m == 0 || w.rows == 0) return;
  launch_gemv(w.fp8 ? "scaled_gemv_fp8" : "scaled_gemv_int8", y, x, ScaledRows{w}, bias, m, w.rows, w.cols, ldx, ldy,
              warp_size, stream);
}

#define LW_GGUF_GEMV(T)                                                                                            \
  template void gguf_gemv<T>(T*, const T*, const void*, BlockFormat, const T*, int64_t, int64_t, int64_t, int64_t, \
                             int64_t, int, cudaStream_t);
LW_GGUF_GEMV(float)
LW_GGUF_GEMV(half)
LW_GGUF_GEMV(bfloat16)
template void scaled_gemv<float>(float*, const float*, const ScaledMatrix&, const float*, int64_t, int64_t, int64_t, int,
                                 cudaStream_t);
template void scaled_gemv<half>(half*, const half*, const ScaledMatrix&, const half*, int64_t, int64_t, int64_t, int,
                                cudaStream_t);
template void scaled_gemv<bfloat16>(bfloat16*, const bfloat16*, const ScaledMatrix&, const bfloat16*, int64_t, int64_t,
                                    int64_t, int, cudaStream_t);
#undef LW_GGUF_GEMV

}  // namespace lw::kernels
