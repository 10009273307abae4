#include "ops/copy.h"

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

}  // namespace lw::ops
