// Linear over quantised weights kept as stored: y[M, N] = x[M, K] @ W^T (+ bias[N]),
// W [N, K] stored row by row as `format` blocks (llama.cpp's layout, K whole blocks). Each weight
// is decoded in registers (kernels/quant/gguf_blocks.h), rounded to T as the expansion at load
// rounds it, and multiplied in fp32: the result is the dense GEMM over the expanded weights up to
// the order of summation. Weights are read once per 8 rows of x, so the kernel serves decode
// batches; larger M expands the weights and runs a dense GEMM (ops::linear). Every format has,
// with f16 or bf16 x, a faster twin on the matrix-fragment layer
// (kernels/quant/gguf_mma_gemv.h), tested against the same reference.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gpu/compat.h"
#include "kernels/quant/dequant.h"

namespace lw::kernels {

// Refuses x (elements of elem_bytes, rows ldx apart) that does not start on a 16-byte boundary
// with every row on one: the GEMVs' vector reads of x.
void check_x_vectors(const char* op, const void* x, int64_t ldx, size_t elem_bytes);

// Rows of x one pass over the weights serves.
inline constexpr int kGgufGemvRowsPerPass = 8;

// x rows are ldx elements apart, y rows ldy; bias may be null. `format` is a quantised one. Every
// GEMV here and gguf_mma_gemv reads x in whole 16-byte vectors: x 16-byte aligned and ldx a
// multiple of 16 / sizeof(T), else refused (check_x_vectors; ops::linear copies such an x).
template <class T>
void gguf_gemv(T* y, const T* x, const void* w, BlockFormat format, const T* bias, int64_t m, int64_t n, int64_t k,
               int64_t ldx, int64_t ldy, int warp_size, cudaStream_t stream);

// The same kernel over one matrix per expert (MoE): experts is a device array of `count`
// pointers to [N, K] block matrices of one format; rows [offsets[e], offsets[e + 1]) of x
// ([rows, K], contiguous) go through expert e into the same rows of y ([rows, N]). The offsets
// (i32 [count + 1], device, from 0 to rows) are read on the device: no host synchronisation. A
// block per column block and row of x (the passes of R rows of every expert at once): at most
// kGgufGroupedMaxRows rows a launch.
inline constexpr int64_t kGgufGroupedMaxRows = 64;  // lint: not-a-warp (rows of x)
template <class T>
void gguf_grouped_gemv(T* y, const T* x, const void* const* experts, int64_t count, BlockFormat format, const int32_t* offsets,
                       int64_t rows, int64_t n, int64_t k, int warp_size, cudaStream_t stream);

// The same kernel over 8-bit values with scales (FP8 E4M3 or int8, kernels/quant/dequant.h's
// ScaledMatrix, `w.rows` = N, `w.cols` = K, K a multiple of 16): each weight decoded, times its
// scale in fp32 and rounded to T as dequantize_scaled rounds it.
template <class T>
void scaled_gemv(T* y, const T* x, const ScaledMatrix& w, const T* bias, int64_t m, int64_t ldx, int64_t ldy,
                 int warp_size, cudaStream_t stream);

}  // namespace lw::kernels
