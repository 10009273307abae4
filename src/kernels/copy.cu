#include "kernels/copy.h"

#include "gpu/launch.h"
#include "gpu/numeric.h"
#include "gpu/vector.h"

namespace lw::kernels {

namespace {

template <class TDst, class TSrc>
__global__ void strided_copy_kernel(CopyLayout l, const TSrc* src, TDst* dst, int64_t numel) {
  gpu::begin_after_prior_grid();
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

using Piece = gpu::Vec<uint32_t, 4>;

__global__ void copy_rows_kernel(const Piece* src, Piece* dst, int64_t rows, int64_t pieces, int64_t src_stride,
                                 int64_t dst_stride) {
  gpu::begin_after_prior_grid();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x, total = rows * pieces;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t r = i / pieces, c = i - r * pieces;
    dst[r * dst_stride + c] = src[r * src_stride + c];
  }
}

}  // namespace

void copy_rows(const void* src, void* dst, int64_t rows, int64_t pieces, int64_t src_stride, int64_t dst_stride,
               int warp_size, cudaStream_t stream) {
  if (rows == 0 || pieces == 0) return;
  LW_CHECK(gpu::aligned_to(gpu::kVectorBytes, src, dst), "copy_rows: pointers not aligned to 16 bytes");
  const int threads = gpu::round_block_size(256, warp_size);
  const int64_t blocks = (rows * pieces + threads - 1) / threads;
  gpu::launch("copy_rows", copy_rows_kernel,
              {dim3(static_cast<unsigned>(blocks < 65536 ? blocks : 65536)), dim3(threads), 0, stream, gpu::kOverlapsPrior},
              static_cast<const Piece*>(src), static_cast<Piece*>(dst), rows, pieces, src_stride, dst_stride);
}

template <class TDst, class TSrc>
void strided_copy(const CopyLayout& layout, const TSrc* src, TDst* dst, int64_t numel, int warp_size,
                  cudaStream_t stream) {
  if (numel == 0) return;
  const int threads = gpu::round_block_size(256, warp_size);
  const int64_t blocks = (numel + threads - 1) / threads;
  gpu::launch("strided_copy", strided_copy_kernel<TDst, TSrc>,
              {dim3(static_cast<unsigned>(blocks < 65536 ? blocks : 65536)), dim3(threads), 0, stream, gpu::kOverlapsPrior}, layout, src, dst,
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
