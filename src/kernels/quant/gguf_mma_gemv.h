// The GGUF GEMV on the matrix-fragment layer (gpu/matrix_fragment.h) for every GGML block format
// the loader keeps: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q2_K to Q6_K (the bulk of
// Q4_K_M, Q5_K_M, Q6_K, Q3_K_M and Q2_K checkpoints, the older 4- and 5-bit ones and the 8-bit
// ones): y[M, N] = x[M, K] @ W^T (+ bias[N]) for f16 and bf16 x, W [N, K] stored row by row as
// llama.cpp's blocks. A warp multiplies 16 rows of W by up to 8 rows of x per 32-element
// sub-block: the 2- to 8-bit values go into A fragments as exact integers in T (a mask, the high
// bits shifted in, and one subtraction per pair; Q8_0's bytes under bf16 through fp32), x into B,
// and the sums take their fp32 scales afterwards. Q4_K and Q5_K:
//   sum_k w[n, k] x[k] = sum_sub (d * sc) * sum_{k in sub} q x[k] - (dmin * m) * sum_{k in sub} x[k],
// the second sum from the same multiply with an A of ones (Q4_1 and Q5_1 alike, d and + m per
// 32-element block; Q4_0 and Q5_0 d (q - zero), Q8_0 d q); Q6_K, Q3_K and Q2_K, whose scales
// cover 16 elements, one multiply per 16 and (d * scale) * sum q x (Q2_K less (dmin * m) * sum x).
// The weights are thus used exactly as gguf's fp32 dequantisation defines them (not rounded to
// T, as the SIMT GEMV and the expansion round them), and a row of x gives the same bits whatever
// other rows share the call. Within a multiply the k order of both operands is permuted alike so
// that each lane reads runs of bytes of its rows. The portable twin is kernels::gguf_gemv (every
// format, every target).
#pragma once
#include <cstdint>

#include "gpu/compat.h"
#include "kernels/quant/dequant.h"

namespace lw::kernels {

// Whether gguf_mma_gemv multiplies this format (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K ... Q6_K; on
// devices with matrix cores or the emulator).
bool gguf_mma_gemv_serves(BlockFormat format);

// T: half or bfloat16. x rows ldx elements apart, y rows ldy; bias may be null; any m (passes of
// 8 rows, each reading W: ops::linear takes it up to kGgufMmaGemvMaxRows); w 16-byte aligned, x
// read in whole 16-byte vectors (x 16-byte aligned, ldx a multiple of 16 / sizeof(T): else
// refused; ops::linear copies a misaligned x). `multiprocessors` (the device's) sizes the blocks.
template <class T>
void gguf_mma_gemv(T* y, const T* x, const void* w, BlockFormat format, const T* bias, int64_t m, int64_t n, int64_t k,
                   int64_t ldx, int64_t ldy, int multiprocessors, cudaStream_t stream);

// The same over one matrix per expert, as gguf_grouped_gemv (kernels/quant/gguf_gemv.h) takes
// them: rows [offsets[e], offsets[e + 1]) of x through experts[e], offsets read on the device;
// each expert's rows bit for bit as gguf_mma_gemv gives them; x 16-byte aligned.
template <class T>
void gguf_mma_grouped_gemv(T* y, const T* x, const void* const* experts, int64_t count, BlockFormat format,
                           const int32_t* offsets, int64_t rows, int64_t n, int64_t k, int multiprocessors,
                           cudaStream_t stream);

}  // namespace lw::kernels
