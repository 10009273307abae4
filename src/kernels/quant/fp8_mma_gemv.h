// A decode-sized FP8 product on NVIDIA's FP8 tensor cores (W8A8, CUDA builds for sm_89 and
// later): out[m, n] = sum_k (xq[m, k] * x_scale) * (wq[n, k] * w_scale) + bias[n] for up to 8
// rows of x, reading the weights once at the memory rate instead of through a GEMM tiled for
// large M. The portable twin is the 8-bit GEMV (kernels/quant/gguf_gemv.h, W8A16) and the
// vendor GEMM; tests compare this kernel with a float64 reference of the same quantised x.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

inline constexpr int kFp8MmaGemvMaxRows = 8;

// The operands. xq: [m, k] e4m3fn codes, row-major; x_scales: group-major [k / group, x_scale_ld]
// (kernels::quantize_fp8's layout); wq: [n, k] e4m3fn codes; w_scales: [n] per row (block
// false) or [ceil(n / 128), k / 128] per 128 x 128 block (block true; then group = 128,
// else group = k). k a multiple of 128; rows 16-byte aligned (k itself is).
struct Fp8MmaGemvArgs {
  const void* xq;
  const float* x_scales;
  int64_t x_scale_ld;
  const void* wq;
  const float* w_scales;
  bool block;
  int64_t m, n, k;
};

// Whether this build has the kernel for the current device (the CUDA target compiled for an
// FP8 architecture with CUDA 12.4 or later: the kernel's PTX version is 8.9 or later). False on
// HIP and the host.
bool fp8_mma_gemv_available();

// T: half or bfloat16 (out and bias). m <= kFp8MmaGemvMaxRows.
template <class T>
void fp8_mma_gemv(T* out, const Fp8MmaGemvArgs& a, const T* bias, cudaStream_t stream);

}  // namespace lw::kernels
