#include "kernels/copy.h"

#include "gpu/launch.h"
#include "gpu/numeric.h"

namespace lw::kernels {

namespace {

template <class TDst, class TSrc>
__global__ void strided_copy_kernel(CopyLayout l, const TSrc* src, TDst* dst, int64_t numel) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += step) {
    int64_t rest = i, s = 0, d = 0;
    for (int k = l.rank - 1; k >= 0; --k) {
      const int64_t idx = rest % l.shape[k];
      rest /= l.shape[k];
      s += idx * l.src_stride[k];
      d += idx * l.dst_stride[k];
    }
    dst[d] = gpu::from_float<TDst>(gpu::to_float(src[s]));
  }
}

}  // namespace

template <class TDst, class TSrc>
void strided_copy(const CopyLayout& layout, const TSrc* src, TDst* dst, int64_t numel, int warp_size,
                  cudaStream_t stream) {
  if (numel == 0) return;
  const int threads = gpu::round_block_size(256, warp_size);
  const int64_t blocks = (numel + threads - 1) / threads;
  gpu::launch("strided_copy", strided_copy_kernel<TDst, TSrc>,
              {dim3(static_cast<unsigned>(blocks < 65536 ? blocks : 65536)), dim3(threads), 0, stream}, layout, src, dst,
              numel);
}

#define LW_COPY(TD, TS) \
  template void strided_copy<TD, TS>(const CopyLayout&, const TS*, TD*, int64_t, int, cudaStream_t);
#define LW_COPY_FROM(TS) LW_COPY(float, TS) LW_COPY(half, TS) LW_COPY(bfloat16, TS)
LW_COPY_FROM(float)
LW_COPY_FROM(half)
LW_COPY_FROM(bfloat16)
#undef LW_COPY_FROM
#undef LW_COPY

}  // namespace lw::kernels
