#include "kernels/quant/gguf_gemv.h"

#include <type_traits>

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "gpu/warp.h"
#include "kernels/expert_rows.h"
#include "kernels/quant/fp8.h"
#include "kernels/quant/gguf_blocks.h"

namespace lw::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int R = kGgufGemvRowsPerPass;

// Where the GGUF kernel reads W: row(col) gives one row's reader, whose decode16(r, v) decodes
// its 16-element run r to fp32 (the row's address found once per row).
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
// One output column (row of W) over rows [row0, row0 + rows) of x, rows <= R: the warp's lanes
// take the row's 16-element runs in turn, decode each once and use it for every row of x.
template <class T, class Source, int V>
LW_DEVICE_INLINE void gemv_column(T* __restrict__ y, const T* __restrict__ x, const Source& w, const T* __restrict__ bias,
                                  int64_t col, int64_t row0, int rows, int64_t k, int64_t ldx, int64_t ldy) {
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

// A warp per output column and pass of R rows of x (blockIdx.y).
template <class T, class Source, int V>
__global__ void gemv_kernel(T* __restrict__ y, const T* __restrict__ x, Source w, const T* __restrict__ bias, int64_t m,
                            int64_t n, int64_t k, int64_t ldx, int64_t ldy) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * (blockDim.x / gpu::kWarpSize) + gpu::warp_id();
  if (col >= n) return;  // the whole warp: no collective is skipped by part of it
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * R;
  gemv_column<T, Source, V>(y, x, w, bias, col, row0, m - row0 < R ? static_cast<int>(m - row0) : R, k, ldx, ldy);
}

// The same over one matrix per expert: block (column block, r) serves row r of x when r begins
// one of its expert's passes of R rows (the expert found from the offsets on the device: no host
// synchronisation), so every pass of every expert runs at once and a block per row bounds the
// launch. Offsets out of range or decreasing make the blocks do nothing.
template <class T, class Block, int V>
__global__ void grouped_gemv_kernel(T* __restrict__ y, const T* __restrict__ x, const uint8_t* const* experts,
                                    const int32_t* offsets, int count, int64_t rows, int64_t n, int64_t k) {
  gpu::begin_after_prior_grid();  // the offsets and x come from the kernels before
  const int64_t col = static_cast<int64_t>(blockIdx.x) * (blockDim.x / gpu::kWarpSize) + gpu::warp_id();
  const int64_t r0 = blockIdx.y;
  ExpertPass pass;
  if (col >= n || !pass_at_row(offsets, count, rows, r0, R, pass)) return;  // whole warps
  gemv_column<T, GgufRows<Block>, V>(y, x, GgufRows<Block>{experts[pass.expert], k}, static_cast<const T*>(nullptr), col, r0,
                                     static_cast<int>(pass.end - r0), k, k, n);
}

// 8-bit rows with scales (FP8 E4M3 or int8): a warp per output column and pass of R rows of x;
// each lane keeps U 16-byte runs of the row in flight (all loaded before any is decoded: one run
// at a time leaves too few bytes in flight to approach the memory rate), finds each run's scale
// once (a run lies in one scale block when the block width is a multiple of 16; otherwise per
// element) and applies it to the run's sum, decoding FP8 with integer operations (no
// conversions: fp8_e4m3_times_2_pow_minus_120); the weights' values are used unrounded.
template <class T, bool FP8, int V, int U>
__global__ void scaled_gemv_kernel(T* __restrict__ y, const T* __restrict__ x, ScaledMatrix w, const T* __restrict__ bias,
                                   int64_t m, int64_t ldx, int64_t ldy) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * (blockDim.x / gpu::kWarpSize) + gpu::warp_id();
  if (col >= w.rows) return;  // the whole warp
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * R;
  const int rows = m - row0 < R ? static_cast<int>(m - row0) : R;
  const T* xr = x + row0 * ldx;
  const uint8_t* p = static_cast<const uint8_t*>(w.q) + col * w.cols;
  const bool block = w.layout == ScaleLayout::block;
  const float* scales = block ? w.scales + (col / w.block_rows) * ((w.cols + w.block_cols - 1) / w.block_cols)
                        : w.layout == ScaleLayout::row ? w.scales + col
                                                       : w.scales;
  // Zero points (int8 with block scales) lie as the scales do.
  const float* zeros = w.zeros ? w.zeros + (scales - w.scales) : nullptr;
  const int block_cols = block ? static_cast<int>(w.block_cols) : 0;
  const int runs_per_block = block && block_cols % gguf::kRun == 0 ? block_cols / gguf::kRun : 0;
  const float row_scale = block ? 0.0f : scales[0];
  float acc[R];
#pragma unroll
  for (int j = 0; j < R; ++j) acc[j] = 0.0f;

  auto use = [&](const gpu::Vec<uint32_t, 4>& b, int r) {
    float wv[gguf::kRun];
#pragma unroll
    for (int i = 0; i < gguf::kRun; ++i) {
      if constexpr (FP8) wv[i] = fp8_e4m3_times_2_pow_minus_120(b.v[i / 4], i % 4) * 0x1p120f;
      else wv[i] = static_cast<float>(static_cast<int8_t>(b.v[i / 4] >> (8 * (i % 4))));
    }
    if (!FP8 && zeros) {  // exact: small integers
#pragma unroll
      for (int i = 0; i < gguf::kRun; ++i)
        wv[i] -= runs_per_block > 0 ? zeros[r / runs_per_block] : zeros[(static_cast<int64_t>(r) * gguf::kRun + i) / block_cols];
    }
    if (block && runs_per_block == 0) {  // a scale block boundary inside the run
#pragma unroll
      for (int i = 0; i < gguf::kRun; ++i) wv[i] *= scales[(static_cast<int64_t>(r) * gguf::kRun + i) / block_cols];
    }
    const float run_scale = !block ? row_scale : runs_per_block > 0 ? scales[r / runs_per_block] : 1.0f;
#pragma unroll
    for (int j = 0; j < R; ++j) {
      if (j < rows) {
        const T* xp = xr + j * ldx + static_cast<int64_t>(r) * gguf::kRun;
        float run = 0.0f;
#pragma unroll
        for (int c = 0; c < gguf::kRun; c += V) {
          const gpu::Vec<T, V> xv = gpu::load_vec<V>(xp + c);
#pragma unroll
          for (int e = 0; e < V; ++e) run += wv[c + e] * gpu::to_float(xv.v[e]);
        }
        acc[j] += run * run_scale;
      }
    }
  };
  auto load_run = [&](int r) {
    return gpu::load_vec<4>(reinterpret_cast<const uint32_t*>(p + static_cast<int64_t>(r) * gguf::kRun));
  };
  const int runs = static_cast<int>(w.cols / gguf::kRun), step = gpu::kWarpSize;
  int r = gpu::lane_id();
  for (; r + (U - 1) * step < runs; r += U * step) {
    gpu::Vec<uint32_t, 4> b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) b[u] = load_run(r + u * step);
#pragma unroll
    for (int u = 0; u < U; ++u) use(b[u], r + u * step);
  }
  for (; r < runs; r += step) use(load_run(r), r);
  const float bv = bias ? gpu::to_float(bias[col]) : 0.0f;
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const float s = gpu::warp_reduce_sum(acc[j]);
    if (gpu::lane_id() == 0 && j < rows) y[(row0 + j) * ldy + col] = gpu::from_float<T>(s + bv);
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
  check_x_vectors(name, x, ldx, sizeof(T));
  gpu::launch(name, gemv_kernel<T, Source, gpu::kVecWidth<T>>, cfg, y, x, w, bias, m, n, k, ldx, ldy);
}

template <class T, class Block>
void launch_format(const char* name, T* y, const T* x, const void* w, const T* bias, int64_t m, int64_t n, int64_t k,
                   int64_t ldx, int64_t ldy, int warp_size, cudaStream_t stream) {
  launch_gemv(name, y, x, GgufRows<Block>{static_cast<const uint8_t*>(w), k}, bias, m, n, k, ldx, ldy, warp_size, stream);
}

// run.template operator()<Block>() for the block struct of a quantised format.
template <class Run>
void with_block(const char* op, BlockFormat format, Run&& run) {
  switch (format) {
    case BlockFormat::q4_0: run.template operator()<gguf::Q4_0>(); return;
    case BlockFormat::q4_1: run.template operator()<gguf::Q4_1>(); return;
    case BlockFormat::q5_0: run.template operator()<gguf::Q5_0>(); return;
    case BlockFormat::q5_1: run.template operator()<gguf::Q5_1>(); return;
    case BlockFormat::q8_0: run.template operator()<gguf::Q8_0>(); return;
    case BlockFormat::q2_k: run.template operator()<gguf::Q2_K>(); return;
    case BlockFormat::q3_k: run.template operator()<gguf::Q3_K>(); return;
    case BlockFormat::q4_k: run.template operator()<gguf::Q4_K>(); return;
    case BlockFormat::q5_k: run.template operator()<gguf::Q5_K>(); return;
    case BlockFormat::q6_k: run.template operator()<gguf::Q6_K>(); return;
    default: break;
  }
  LW_FAIL(op << ": no kernel for " << block_format_name(format));
}

// The dense GEMV's launch name for a format (errors and profiles name the format).
const char* gemv_name(BlockFormat format) {
  switch (format) {
    case BlockFormat::q4_0: return "gguf_gemv_q4_0";
    case BlockFormat::q4_1: return "gguf_gemv_q4_1";
    case BlockFormat::q5_0: return "gguf_gemv_q5_0";
    case BlockFormat::q5_1: return "gguf_gemv_q5_1";
    case BlockFormat::q8_0: return "gguf_gemv_q8_0";
    case BlockFormat::q2_k: return "gguf_gemv_q2_k";
    case BlockFormat::q3_k: return "gguf_gemv_q3_k";
    case BlockFormat::q4_k: return "gguf_gemv_q4_k";
    case BlockFormat::q5_k: return "gguf_gemv_q5_k";
    case BlockFormat::q6_k: return "gguf_gemv_q6_k";
    default: return "gguf_gemv";
  }
}

void check_blocks(const char* op, BlockFormat format, int64_t m, int64_t n, int64_t k) {
  LW_CHECK(is_quantized(format), op << ": " << block_format_name(format) << " is not a quantised block format");
  LW_CHECK(m >= 0 && n >= 0 && k >= 0 && k % block_format_elems(format) == 0,
           op << ": [M, N, K] = [" << m << ", " << n << ", " << k << "]: K must be whole " << block_format_name(format)
              << " blocks of " << block_format_elems(format));
}

}  // namespace

void check_x_vectors(const char* op, const void* x, int64_t ldx, size_t elem_bytes) {
  const int64_t width = gpu::kVectorBytes / static_cast<int64_t>(elem_bytes);
  LW_CHECK(gpu::aligned_to(gpu::kVectorBytes, x) && ldx % width == 0,
           op << ": x must start " << gpu::kVectorBytes << "-byte aligned with its rows a multiple of " << width
              << " elements apart (x at " << x << ", rows " << ldx << " apart)");
}

template <class T>
void gguf_gemv(T* y, const T* x, const void* w, BlockFormat format, const T* bias, int64_t m, int64_t n, int64_t k,
               int64_t ldx, int64_t ldy, int warp_size, cudaStream_t stream) {
  check_blocks("gguf_gemv", format, m, n, k);
  if (m == 0 || n == 0) return;
  with_block("gguf_gemv", format, [&]<class Block>() {
    launch_format<T, Block>(gemv_name(format), y, x, w, bias, m, n, k, ldx, ldy, warp_size, stream);
  });
}

template <class T>
void gguf_grouped_gemv(T* y, const T* x, const void* const* experts, int64_t count, BlockFormat format, const int32_t* offsets,
                       int64_t rows, int64_t n, int64_t k, int warp_size, cudaStream_t stream) {
  const char* op = "gguf_grouped_gemv";
  check_blocks(op, format, rows, n, k);
  LW_CHECK(experts && offsets && count >= 1 && count <= 0x7fffffff,
           op << ": " << count << " experts (with their matrices and offsets on the device)");
  LW_CHECK(rows <= kGgufGroupedMaxRows, op << ": " << rows << " rows of x; a launch takes at most " << kGgufGroupedMaxRows);
  if (rows == 0 || n == 0) return;
  const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  LW_CHECK(blocks <= 0x7fffffff, op << ": " << n << " output columns exceed the grid limit");
  check_x_vectors(op, x, k, sizeof(T));
  const auto* table = reinterpret_cast<const uint8_t* const*>(experts);
  with_block(op, format, [&]<class Block>() {
    const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(rows)),
                                dim3(kWarpsPerBlock * warp_size), 0, stream, gpu::kOverlapsPrior};
    constexpr int V = gpu::kVecWidth<T>;
    gpu::launch(op, grouped_gemv_kernel<T, Block, V>, cfg, y, x, table, offsets, static_cast<int>(count), rows, n, k);
  });
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
  LW_CHECK(!w.zeros || (!w.fp8 && w.layout == ScaleLayout::block),
           "scaled_gemv: zero points belong to int8 values with block scales");
  LW_CHECK(!w.col_perm, "scaled_gemv: weights with permuted columns need x's columns gathered first (and no col_perm)");
  LW_CHECK(w.cols / gguf::kRun <= 0x7fffffff, "scaled_gemv: K = " << w.cols << " exceeds the kernel's run index");
  check_x_vectors("scaled_gemv", x, ldx, sizeof(T));
  if (m == 0 || w.rows == 0) return;
  const int64_t blocks = (w.rows + kWarpsPerBlock - 1) / kWarpsPerBlock, passes = (m + R - 1) / R;
  LW_CHECK(blocks <= 0x7fffffff && passes <= 65535,
           "scaled_gemv: " << w.rows << " output columns x " << m << " rows exceed the grid limits");
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(passes)),
                              dim3(kWarpsPerBlock * warp_size), 0, stream};
  constexpr int V = gpu::kVecWidth<T>, U = 4;
  auto run = [&]<bool FP8>(const char* name) {
    gpu::launch(name, scaled_gemv_kernel<T, FP8, V, U>, cfg, y, x, w, bias, m, ldx, ldy);
  };
  if (w.fp8) run.template operator()<true>("scaled_gemv_fp8");
  else run.template operator()<false>("scaled_gemv_int8");
}

#define LW_GGUF_GEMV(T)                                                                                            \
  template void gguf_gemv<T>(T*, const T*, const void*, BlockFormat, const T*, int64_t, int64_t, int64_t, int64_t, \
                             int64_t, int, cudaStream_t);                                                          \
  template void gguf_grouped_gemv<T>(T*, const T*, const void* const*, int64_t, BlockFormat, const int32_t*, int64_t, \
                                     int64_t, int64_t, int, cudaStream_t);
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
