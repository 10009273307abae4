// The GGUF GEMV on the matrix-fragment layer (gpu/matrix_fragment.h) for Q4_K and Q5_K blocks
// (the bulk of Q4_K_M and Q5_K_M checkpoints): y[M, N] = x[M, K] @ W^T (+ bias[N]) for f16 and
// bf16 x, W [N, K] stored row by row as llama.cpp's blocks. A warp multiplies 16 rows of W by up
// to 8 rows of x per 32-element sub-block: the 4-bit (Q5_K: 5-bit) values go into A fragments as
// exact integers in T (a mask, for Q5_K a shifted bit, and one subtraction per pair), x into B,
// and the sub-block's sums take its fp32 scale and minimum afterwards:
//   sum_k w[n, k] x[k] = sum_sub (d * sc) * sum_{k in sub} q x[k] - (dmin * m) * sum_{k in sub} x[k],
// the second sum from the same multiply with an A of ones. The weights are thus used exactly as
// gguf's fp32 dequantisation defines them (not rounded to T, as the SIMT GEMV and the expansion
// round them), and a row of x gives the same bits whatever other rows share the call. Within a
// sub-block the k order of both operands is permuted alike so that each lane reads one run of
// bytes per row. The portable twin is kernels::gguf_gemv (every format, every target).
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "kernels/quant/dequant.h"

namespace lw::kernels {

// Whether gguf_mma_gemv multiplies this format (Q4_K, Q5_K; on devices with matrix cores or the
// emulator).
bool gguf_mma_gemv_serves(BlockFormat format);

// T: half or bfloat16. x rows ldx elements apart, y rows ldy; bias may be null; any m (passes of
// 8 rows, each reading W: ops::linear takes it up to kGgufMmaGemvMaxRows); w 16-byte aligned.
// `multiprocessors` (the device's) sizes the blocks.
template <class T>
void gguf_mma_gemv(T* y, const T* x, const void* w, BlockFormat format, const T* bias, int64_t m, int64_t n, int64_t k,
                   int64_t ldx, int64_t ldy, int multiprocessors, cudaStream_t stream);

// The same over one matrix per expert, as gguf_grouped_gemv (kernels/quant/gguf_gemv.h) takes
// them: rows [offsets[e], offsets[e + 1]) of x through experts[e], offsets read on the device;
// each expert's rows bit for bit as gguf_mma_gemv gives them.
template <class T>
void gguf_mma_grouped_gemv(T* y, const T* x, const void* const* experts, int64_t count, BlockFormat format,
                           const int32_t* offsets, int64_t rows, int64_t n, int64_t k, int multiprocessors,
                           cudaStream_t stream);

}  // namespace lw::kernels
