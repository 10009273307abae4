#include "kernels/quant/dequant.h"

#include <algorithm>

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"
#include "kernels/quant/fp8.h"
#include "kernels/quant/gguf_blocks.h"

namespace lw::kernels {

namespace {

template <class T, class Src>
__global__ void convert_kernel(T* out, const Src* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = gpu::from_float<T>(gpu::to_float(in[i]));
}

// A thread per 16-element run of a block, stored in vectors of V elements (adjacent threads
// write adjacent runs: whole lines per warp).
template <class T, class Block, int V>
__global__ void dequant_kernel(T* out, const uint8_t* in, int64_t runs) {
  constexpr int kRunsPerBlock = Block::kElems / gguf::kRun;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < runs; r += stride) {
    float v[gguf::kRun];
    Block::decode16(in + r / kRunsPerBlock * Block::kBytes, static_cast<int>(r % kRunsPerBlock), v);
    T* o = out + r * gguf::kRun;
#pragma unroll
    for (int c = 0; c < gguf::kRun; c += V) {
      gpu::Vec<T, V> w;
#pragma unroll
      for (int e = 0; e < V; ++e) w.v[e] = gpu::from_float<T>(v[c + e]);
      gpu::store_vec<V>(o + c, w);
    }
  }
}

// A thread per run of R bytes of one row (R divides cols; R = 16 with vector stores, else 1).
template <class T, int R>
__global__ void dequant_scaled_kernel(T* out, ScaledMatrix m) {
  const int64_t runs_per_row = m.cols / R, runs = m.rows * runs_per_row;
  const int64_t block_cols = m.layout == ScaleLayout::block ? (m.cols + m.block_cols - 1) / m.block_cols : 0;
  const auto* q = static_cast<const uint8_t*>(m.q);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < runs; r += stride) {
    const int64_t row = r / runs_per_row, col0 = (r - row * runs_per_row) * R;
    uint8_t bytes[R];
    if constexpr (R == 16) {
      const gpu::Vec<uint8_t, 16> v = gpu::load_vec<16>(q + row * m.cols + col0);
#pragma unroll
      for (int e = 0; e < R; ++e) bytes[e] = v.v[e];
    } else {
      bytes[0] = q[row * m.cols + col0];
    }
    auto block_at = [&](int64_t col) { return (row / m.block_rows) * block_cols + col / m.block_cols; };
    auto scale_at = [&](int64_t col) {
      return m.layout == ScaleLayout::tensor ? m.scales[0]
             : m.layout == ScaleLayout::row  ? m.scales[row]
                                             : m.scales[block_at(col)];
    };
    auto zero_at = [&](int64_t col) { return m.zeros ? m.zeros[block_at(col)] : 0.0f; };
    // Block scales change every block_cols columns: once per run when that is a multiple of R,
    // else looked up per element.
    const bool one_scale = m.layout != ScaleLayout::block || m.block_cols % R == 0;
    const float run_scale = scale_at(col0), run_zero = zero_at(col0);
#pragma unroll
    for (int c = 0; c < R; c += (R == 16 ? gpu::kVecWidth<T> : 1)) {
      constexpr int V = R == 16 ? gpu::kVecWidth<T> : 1;
      gpu::Vec<T, V> w;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float scale = one_scale ? run_scale : scale_at(col0 + c + e);
        const float zero = one_scale ? run_zero : zero_at(col0 + c + e);
        const uint8_t b = bytes[c + e];
        const float value =
            m.fp8 ? fp8_e4m3_times_2_pow_minus_120(b, 0) * 0x1p120f : static_cast<float>(static_cast<int8_t>(b)) - zero;
        w.v[e] = gpu::from_float<T>(value * scale);
      }
      if constexpr (R == 1) {
        out[row * m.cols + (m.col_perm ? m.col_perm[col0 + c] : col0 + c)] = w.v[0];
      } else {
        gpu::store_vec<V>(out + row * m.cols + col0 + c, w);
      }
    }
  }
}

struct FormatInfo {
  BlockFormat format;
  const char* name;
  int64_t elems, bytes;
};
constexpr FormatInfo kFormats[] = {
    {BlockFormat::f32, "f32", 1, 4},
    {BlockFormat::f16, "f16", 1, 2},
    {BlockFormat::bf16, "bf16", 1, 2},
    {BlockFormat::q4_0, "q4_0", gguf::Q4_0::kElems, gguf::Q4_0::kBytes},
    {BlockFormat::q4_1, "q4_1", gguf::Q4_1::kElems, gguf::Q4_1::kBytes},
    {BlockFormat::q5_0, "q5_0", gguf::Q5_0::kElems, gguf::Q5_0::kBytes},
    {BlockFormat::q5_1, "q5_1", gguf::Q5_1::kElems, gguf::Q5_1::kBytes},
    {BlockFormat::q8_0, "q8_0", gguf::Q8_0::kElems, gguf::Q8_0::kBytes},
    {BlockFormat::q2_k, "q2_k", gguf::Q2_K::kElems, gguf::Q2_K::kBytes},
    {BlockFormat::q3_k, "q3_k", gguf::Q3_K::kElems, gguf::Q3_K::kBytes},
    {BlockFormat::q4_k, "q4_k", gguf::Q4_K::kElems, gguf::Q4_K::kBytes},
    {BlockFormat::q5_k, "q5_k", gguf::Q5_K::kElems, gguf::Q5_K::kBytes},
    {BlockFormat::q6_k, "q6_k", gguf::Q6_K::kElems, gguf::Q6_K::kBytes},
};

const FormatInfo& info(BlockFormat format) {
  for (const FormatInfo& f : kFormats)
    if (f.format == format) return f;
  LW_FAIL("unknown block format " << static_cast<int>(format));
}

}  // namespace

const char* block_format_name(BlockFormat format) { return info(format).name; }
int64_t block_format_elems(BlockFormat format) { return info(format).elems; }
int64_t block_format_bytes(BlockFormat format) { return info(format).bytes; }

template <class T>
void dequantize_blocks(T* out, const void* src, BlockFormat format, int64_t n, int warp_size, cudaStream_t stream) {
  if (n == 0) return;
  LW_CHECK(n % block_format_elems(format) == 0,
           "dequantize: " << n << " elements are not whole " << block_format_name(format) << " blocks of "
                          << block_format_elems(format));
  const int threads = gpu::round_block_size(256, warp_size);
  const int64_t items = is_quantized(format) ? n / gguf::kRun : n;
  // Enough blocks to fill a large GPU; the grid-stride loop covers the rest.
  const int64_t blocks = std::min<int64_t>((items + threads - 1) / threads, 8192);
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, stream};
  const auto* bytes = static_cast<const uint8_t*>(src);
  constexpr int V = gpu::kVecWidth<T>;
  const bool vec = gpu::aligned_to(gpu::kVectorBytes, out);
  auto quantized = [&]<class Block>(const char* name) {
    if (vec) gpu::launch(name, dequant_kernel<T, Block, V>, cfg, out, bytes, items);
    else gpu::launch(name, dequant_kernel<T, Block, 1>, cfg, out, bytes, items);
  };
  switch (format) {
    case BlockFormat::f32:
      gpu::launch("weights_convert_f32", convert_kernel<T, float>, cfg, out, static_cast<const float*>(src), n);
      return;
    case BlockFormat::f16:
      gpu::launch("weights_convert_f16", convert_kernel<T, half>, cfg, out, static_cast<const half*>(src), n);
      return;
    case BlockFormat::bf16:
      gpu::launch("weights_convert_bf16", convert_kernel<T, bfloat16>, cfg, out, static_cast<const bfloat16*>(src), n);
      return;
    case BlockFormat::q4_0: quantized.template operator()<gguf::Q4_0>("weights_dequant_q4_0"); return;
    case BlockFormat::q4_1: quantized.template operator()<gguf::Q4_1>("weights_dequant_q4_1"); return;
    case BlockFormat::q5_0: quantized.template operator()<gguf::Q5_0>("weights_dequant_q5_0"); return;
    case BlockFormat::q5_1: quantized.template operator()<gguf::Q5_1>("weights_dequant_q5_1"); return;
    case BlockFormat::q8_0: quantized.template operator()<gguf::Q8_0>("weights_dequant_q8_0"); return;
    case BlockFormat::q2_k: quantized.template operator()<gguf::Q2_K>("weights_dequant_q2_k"); return;
    case BlockFormat::q3_k: quantized.template operator()<gguf::Q3_K>("weights_dequant_q3_k"); return;
    case BlockFormat::q4_k: quantized.template operator()<gguf::Q4_K>("weights_dequant_q4_k"); return;
    case BlockFormat::q5_k: quantized.template operator()<gguf::Q5_K>("weights_dequant_q5_k"); return;
    case BlockFormat::q6_k: quantized.template operator()<gguf::Q6_K>("weights_dequant_q6_k"); return;
  }
  LW_FAIL("dequantize: unknown block format " << static_cast<int>(format));
}

template <class T>
void dequantize_scaled(T* out, const ScaledMatrix& m, int warp_size, cudaStream_t stream) {
  LW_CHECK(m.rows >= 0 && m.cols >= 0, "dequantize_scaled: a matrix of " << m.rows << " x " << m.cols);
  LW_CHECK(m.layout != ScaleLayout::block || (m.block_rows > 0 && m.block_cols > 0),
           "dequantize_scaled: scale blocks of " << m.block_rows << " x " << m.block_cols);
  LW_CHECK(!m.zeros || (!m.fp8 && m.layout == ScaleLayout::block),
           "dequantize_scaled: zero points belong to int8 values with block scales");
  if (m.rows == 0 || m.cols == 0) return;
  const int threads = gpu::round_block_size(256, warp_size);
  // Runs of 16 bytes where every row starts 16-byte aligned in both the bytes and out (and the
  // columns stay in order).
  const bool vec = m.cols % 16 == 0 && !m.col_perm && gpu::aligned_to(gpu::kVectorBytes, out) && gpu::aligned_to(16, m.q);
  const int64_t runs = m.rows * (vec ? m.cols / 16 : m.cols);
  const int64_t blocks = std::min<int64_t>((runs + threads - 1) / threads, 8192);
  const gpu::LaunchConfig cfg{dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, stream};
  if (vec) gpu::launch("weights_dequant_scaled", dequant_scaled_kernel<T, 16>, cfg, out, m);
  else gpu::launch("weights_dequant_scaled", dequant_scaled_kernel<T, 1>, cfg, out, m);
}

template void dequantize_blocks<float>(float*, const void*, BlockFormat, int64_t, int, cudaStream_t);
template void dequantize_blocks<half>(half*, const void*, BlockFormat, int64_t, int, cudaStream_t);
template void dequantize_blocks<bfloat16>(bfloat16*, const void*, BlockFormat, int64_t, int, cudaStream_t);
template void dequantize_scaled<float>(float*, const ScaledMatrix&, int, cudaStream_t);
template void dequantize_scaled<half>(half*, const ScaledMatrix&, int, cudaStream_t);
template void dequantize_scaled<bfloat16>(bfloat16*, const ScaledMatrix&, int, cudaStream_t);

}  // namespace lw::kernels
