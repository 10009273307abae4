// 8-bit GPTQ checkpoints (AutoGPTQ / GPTQModel, bits 8): int32 words of unsigned bytes,
//   qweight [K/4, N]: column k of row n at bits 8 (k % 4) .. 8 (k % 4) + 7 of word [k / 4, n];
//   qzeros  [G, N/4]: the zero point of row n at bits 8 (n % 4) .. of word [g, n / 4] (plus one
//                     in format "gptq", which stores zero - 1);
//   w[n, k] = (q - zero[g, n]) * scales[g, n],  g = g_idx[k] (or k / group).
// They are kept as the signed bytes q - 128 with the scales, zero points - 128 where a checkpoint
// has others than 128 (asymmetric), and act-order columns sorted by group (ops::Weight::
// int8_per_group); gptq8_expand gives the weights in the model's dtype where they cannot stay.
#pragma once
#include <cstdint>

#include "gpu/compat.h"

namespace lw::kernels {

// out [rows, cols] (row-major) = q - 128 of the matrix's rows [row0, row0 + rows) and columns
// [col0, col0 + cols), as signed bytes. qweight holds K/4 x N words. col_perm (device, i32 [K],
// or null): out's column j is the matrix's column col_perm[j] (all K columns).
void gptq8_unpack(int8_t* out, const int32_t* qweight, int64_t n, int64_t k, int64_t row0, int64_t rows, int64_t col0,
                  int64_t cols, const int32_t* col_perm, cudaStream_t stream);

struct Gptq8Words {
  const int32_t* qweight = nullptr;  // [K/4, N]
  const int32_t* qzeros = nullptr;   // [G, N/4]
  const float* scales = nullptr;     // [G, N]
  const int32_t* g_idx = nullptr;    // [K] (each in 0 .. G - 1), or null: column k in group k / group
  int64_t n = 0, k = 0, group = 0, groups = 0;
  int zero_add = 0;  // 1 where qzeros hold zero - 1
};
// out [N, K] (row-major) = (q - zero) * scale of every weight in fp32, rounded once to T.
template <class T>
void gptq8_expand(T* out, const Gptq8Words& w, cudaStream_t stream);

}  // namespace lw::kernels
