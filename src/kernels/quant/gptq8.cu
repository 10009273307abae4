#include "kernels/quant/gptq8.h"

#include <algorithm>

#include "base/error.h"
#include "gpu/launch.h"
#include "gpu/numeric.h"

namespace lw::kernels {

namespace {

constexpr int64_t kThreads = 256;
int64_t grid_for(int64_t n) { return std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

LW_DEVICE_INLINE uint32_t byte_of(int32_t word, int64_t i) { return (static_cast<uint32_t>(word) >> (8 * (i & 3))) & 255u; }

// A thread per output byte (grid-stride): consecutive threads take consecutive columns, whose
// words are four apart in qweight's rows of N.
__global__ void unpack_kernel(int8_t* out, const int32_t* qweight, int64_t n, int64_t row0, int64_t rows, int64_t col0,
                              int64_t cols, const int32_t* col_perm) {
  const int64_t total = rows * cols, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t r = row0 + idx / cols, c = col_perm ? col_perm[idx % cols] : col0 + idx % cols;
    out[idx] = static_cast<int8_t>(static_cast<int>(byte_of(qweight[(c / 4) * n + r], c)) - 128);
  }
}

template <class T>
__global__ void expand_kernel(T* out, Gptq8Words w) {
  const int64_t total = w.n * w.k, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t r = idx / w.k, c = idx % w.k;
    const int64_t g = w.g_idx ? w.g_idx[c] : c / w.group;
    const int q = static_cast<int>(byte_of(w.qweight[(c / 4) * w.n + r], c));
    const int zero = static_cast<int>(byte_of(w.qzeros[g * (w.n / 4) + r / 4], r)) + w.zero_add;
    out[idx] = gpu::from_float<T>(static_cast<float>(q - zero) * w.scales[g * w.n + r]);
  }
}

}  // namespace

void gptq8_unpack(int8_t* out, const int32_t* qweight, int64_t n, int64_t k, int64_t row0, int64_t rows, int64_t col0,
                  int64_t cols, const int32_t* col_perm, cudaStream_t stream) {
  LW_CHECK(n > 0 && k > 0 && n % 4 == 0 && k % 4 == 0 && row0 >= 0 && rows > 0 && row0 + rows <= n && col0 >= 0 &&
               cols > 0 && col0 + cols <= k,
           "gptq8_unpack: rows [" << row0 << ", " << row0 + rows << ") and columns [" << col0 << ", " << col0 + cols
                                  << ") of [" << n << ", " << k << "] (N and K multiples of 4)");
  LW_CHECK(!col_perm || (col0 == 0 && cols == k), "gptq8_unpack: permuted columns are all K columns, not ["
                                                     << col0 << ", " << col0 + cols << ")");
  gpu::launch("gptq8_unpack", unpack_kernel, {dim3(static_cast<unsigned>(grid_for(rows * cols))), dim3(kThreads), 0, stream},
              out, qweight, n, row0, rows, col0, cols, col_perm);
}

template <class T>
void gptq8_expand(T* out, const Gptq8Words& w, cudaStream_t stream) {
  LW_CHECK(w.qweight && w.qzeros && w.scales && w.n > 0 && w.k > 0 && w.n % 4 == 0 && w.k % 4 == 0 && w.group > 0 &&
               w.groups == (w.k + w.group - 1) / w.group,
           "gptq8_expand: [" << w.n << ", " << w.k << "] in " << w.groups << " groups of " << w.group
                             << " (N and K multiples of 4, every tensor given)");
  gpu::launch("gptq8_expand", expand_kernel<T>, {dim3(static_cast<unsigned>(grid_for(w.n * w.k))), dim3(kThreads), 0, stream},
              out, w);
}

template void gptq8_expand<float>(float*, const Gptq8Words&, cudaStream_t);
template void gptq8_expand<half>(half*, const Gptq8Words&, cudaStream_t);
template void gptq8_expand<bfloat16>(bfloat16*, const Gptq8Words&, cudaStream_t);

}  // namespace lw::kernels
