#include "ops/copy.h"

#include "gpu/runtime.h"
#include "kernels/copy.h"
#include "ops/check.h"

namespace lw::ops {

void copy(Context& ctx, const Tensor& src, const Tensor& dst) {
  check_on_device("copy", "src", src);
  check_on_device("copy", "dst", dst);
  check_float("copy", "src", src);
  check_float("copy", "dst", dst);
  check_same_shape("copy", "src", src, "dst", dst);
  LW_CHECK(src.dim() <= kernels::kMaxCopyRank, "copy: rank " << src.dim() << " exceeds " << kernels::kMaxCopyRank);
  LW_CHECK(src.numel() == 0 || src.data_ptr() != dst.data_ptr(), "copy: src and dst are the same memory");
  kernels::CopyLayout l{};
  l.rank = src.dim();
  for (int k = 0; k < l.rank; ++k) {
    l.shape[k] = src.size(k);
    l.src_stride[k] = src.stride(k);
    l.dst_stride[k] = dst.stride(k);
  }
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
