#include "ops/copy.h"

#include "gpu/runtime.h"
#include "gpu/vector.h"
#include "kernels/copy.h"
#include "ops/check.h"

namespace lw::ops {

namespace {

// The copy's dims with size-1 dims dropped and neighbours that form one run in both tensors
// merged (a slice of a fused tensor's rows becomes [rows, row length]): fewer divisions per
// element, and rows the vector kernel can take.
kernels::CopyLayout collapsed_layout(const Tensor& src, const Tensor& dst) {
  kernels::CopyLayout l{};
  l.rank = 0;
  for (int k = 0; k < src.dim(); ++k) {
    const int64_t n = src.size(k);
    if (n == 1) continue;
    const int p = l.rank - 1;
    if (p >= 0 && l.src_stride[p] == src.stride(k) * n && l.dst_stride[p] == dst.stride(k) * n) {
      l.shape[p] *= n;
      l.src_stride[p] = src.stride(k);
      l.dst_stride[p] = dst.stride(k);
    } else {
      l.shape[l.rank] = n;
      l.src_stride[l.rank] = src.stride(k);
      l.dst_stride[l.rank] = dst.stride(k);
      ++l.rank;
    }
  }
  if (l.rank == 0) {  // a single element
    l.rank = 1;
    l.shape[0] = 1;
    l.src_stride[0] = l.dst_stride[0] = 1;
  }
  return l;
}

// Copies of one dtype whose layout is rows of whole 16-byte pieces (at most two dims, the
// inner one contiguous in both, every row aligned) go through the vector kernel.
bool copy_as_rows(Context& ctx, const Tensor& src, const Tensor& dst, const kernels::CopyLayout& l) {
  if (src.dtype() != dst.dtype() || l.rank > 2) return false;
  const int inner = l.rank - 1;
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype())), piece = gpu::kVectorBytes;
  const int64_t row_bytes = l.shape[inner] * es;
  const int64_t src_row = l.rank == 2 ? l.src_stride[0] * es : row_bytes;
  const int64_t dst_row = l.rank == 2 ? l.dst_stride[0] * es : row_bytes;
  if (l.src_stride[inner] != 1 || l.dst_stride[inner] != 1 || row_bytes % piece != 0 || src_row % piece != 0 ||
      dst_row % piece != 0 || !gpu::aligned_to(piece, src.data_ptr(), dst.data_ptr()))
    return false;
  kernels::copy_rows(src.data_ptr(), dst.data_ptr(), l.rank == 2 ? l.shape[0] : 1, row_bytes / piece,
                     src_row / piece, dst_row / piece, ctx.warp_size(), ctx.stream().get());
  return true;
}

}  // namespace

void copy(Context& ctx, const Tensor& src, const Tensor& dst) {
  check_on_device("copy", "src", src);
  check_on_device("copy", "dst", dst);
  check_float("copy", "src", src);
  check_float("copy", "dst", dst);
  check_same_shape("copy", "src", src, "dst", dst);
  LW_CHECK(src.dim() <= kernels::kMaxCopyRank, "copy: rank " << src.dim() << " exceeds " << kernels::kMaxCopyRank);
  LW_CHECK(src.numel() == 0 || src.data_ptr() != dst.data_ptr(), "copy: src and dst are the same memory");
  if (src.numel() == 0) return;
  const kernels::CopyLayout l = collapsed_layout(src, dst);
  if (copy_as_rows(ctx, src, dst, l)) return;
  dispatch_float(src.dtype(), "copy", [&]<class TS>() {
    dispatch_float(dst.dtype(), "copy", [&]<class TD>() {
      kernels::strided_copy<TD, TS>(l, src.data<TS>(), dst.data<TD>(), src.numel(), ctx.warp_size(), ctx.stream().get());
    });
  });
}

Tensor contiguous(Context& ctx, const Tensor& src) {
  Tensor out = ctx.empty(src.shape(), src.dtype());
  copy(ctx, src, out);
  return out;
}

Tensor concat(Context& ctx, const std::vector<Tensor>& parts, int dim) {
  LW_CHECK(!parts.empty(), "concat: no tensors");
  const Tensor& first = parts.front();
  LW_CHECK(first.defined() && dim >= -first.dim() && dim < first.dim(),
           "concat: dimension " << dim << " out of range for " << first.describe());
  const int d = dim < 0 ? dim + first.dim() : dim;
  std::vector<int64_t> shape = first.shape();
  shape[d] = 0;
  for (const Tensor& p : parts) {
    std::vector<int64_t> a = p.shape(), b = first.shape();
    LW_CHECK(p.dim() == first.dim() && p.dtype() == first.dtype(),
             "concat: " << p.describe() << " does not match " << first.describe());
    a[d] = b[d] = 0;
    LW_CHECK(a == b, "concat: " << p.describe() << " differs from " << first.describe() << " outside dimension " << d);
    shape[d] += p.size(d);
  }
  Tensor out = ctx.empty(shape, first.dtype());
  int64_t at = 0;
  for (const Tensor& p : parts) {
    copy(ctx, p, out.slice(d, at, at + p.size(d)));
    at += p.size(d);
  }
  return out;
}

Tensor stack_rows(Context& ctx, const std::vector<Tensor>& parts) {
  LW_CHECK(!parts.empty(), "stack_rows: no tensors");
  std::vector<int64_t> shape = parts.front().shape();
  LW_CHECK(!shape.empty(), "stack_rows: " << parts.front().describe() << " has no rows");
  shape[0] = 0;
  for (const Tensor& p : parts) {
    check_on_device("stack_rows", "part", p);
    std::vector<int64_t> a = p.shape(), b = parts.front().shape();
    a[0] = b[0] = 0;
    LW_CHECK(p.is_contiguous() && p.dtype() == parts.front().dtype() && a == b,
             "stack_rows: " << p.describe() << " is not contiguous or does not match " << parts.front().describe());
    shape[0] += p.size(0);
  }
  Tensor out = ctx.empty(shape, parts.front().dtype());
  size_t at = 0;
  for (const Tensor& p : parts) {
    LW_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(out.data_ptr()) + at, p.data_ptr(), p.nbytes(),
                                  cudaMemcpyDeviceToDevice, ctx.stream().get()));
    at += p.nbytes();
  }
  return out;
}

}  // namespace lw::ops
