// Expansion of stored weight formats into a float tensor on the device: plain float types
// converted, GGML's quantised blocks (llama.cpp's layout) and 8-bit values with scales (FP8,
// INT8) expanded in fp32 and rounded once.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// The stored formats the expansion kernels read. The kernel layer's own list: checkpoint
// readers (weights/) map their file types onto it.
// The q formats are GGML's (kernels/quant/gguf_blocks.h).
enum class BlockFormat : uint8_t { f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k };

inline bool is_quantized(BlockFormat format) {
  return format != BlockFormat::f32 && format != BlockFormat::f16 && format != BlockFormat::bf16;
}

const char* block_format_name(BlockFormat format);
// Elements per block (1 for the plain float types) and bytes per block.
int64_t block_format_elems(BlockFormat format);
int64_t block_format_bytes(BlockFormat format);

// out[i] = element i of `src` (n elements stored as `format`, in the file's block layout),
// rounded to T. `src` is device memory; n must be whole blocks.
template <class T>
void dequantize_blocks(T* out, const void* src, BlockFormat format, int64_t n, int warp_size, cudaStream_t stream);

// A matrix of 8-bit values with float scales (ops/weight.h's fp8 and int8 formats): value
// [n, k] = decode(q[n, k]) * scale, decode being FP8 E4M3 (kernels/quant/fp8.h) or a signed
// byte, and the scale one for the whole matrix, one per row, or one per block of block_rows x
// block_cols (row-major over ceil(rows / block_rows) x ceil(cols / block_cols) blocks). Signed
// bytes with block scales may have a zero point per block: value = (q - zero) * scale.
enum class ScaleLayout : uint8_t { tensor, row, block };
struct ScaledMatrix {
  const void* q;  // rows x cols bytes, row-major, contiguous
  bool fp8;       // FP8 E4M3 bytes, else int8
  const float* scales;
  ScaleLayout layout;
  int64_t rows, cols;
  int64_t block_rows = 0, block_cols = 0;  // ScaleLayout::block only
  const float* zeros = nullptr;            // int8 with ScaleLayout::block: integers, laid out as the scales
  // dequantize_scaled: column k of q is the matrix's column col_perm[k] (act-order weights, whose
  // columns are stored by group). scaled_gemv refuses it: its caller gathers x's columns.
  const int32_t* col_perm = nullptr;
};

// out[n * cols + k] = the value in fp32, rounded once to T. Device memory.
template <class T>
void dequantize_scaled(T* out, const ScaledMatrix& m, int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
