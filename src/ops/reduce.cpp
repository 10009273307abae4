#include "ops/reduce.h"

#include "ops/check.h"

namespace lw::ops {

void row_reduce(Context& ctx, Reduce op, const Tensor& x, const Tensor& out) {
  check_on_device("row_reduce", "x", x);
  check_on_device("row_reduce", "out", out);
  check_float("row_reduce", "x", x);
  LW_CHECK(x.dim() == 2, "row_reduce: x " << x.describe() << " must be 2-D [rows, cols]");
  LW_CHECK(x.stride(1) == 1 || x.size(1) <= 1, "row_reduce: x " << x.describe() << " must have contiguous rows");
  LW_CHECK(out.dtype() == DType::f32 && out.dim() == 1 && out.size(0) == x.size(0) && out.is_contiguous(),
           "row_reduce: out " << out.describe() << " must be a contiguous f32[" << x.size(0) << "]");
  dispatch_float(x.dtype(), "row_reduce", [&]<class T>() {
    kernels::row_reduce<T>(op, x.data<T>(), out.data<float>(), x.size(0), x.size(1), x.stride(0), ctx.warp_size(),
                           ctx.stream().get());
  });
}

void row_sum(Context& ctx, const Tensor& x, const Tensor& out) { row_reduce(ctx, Reduce::sum, x, out); }

void tensor_reduce(Context& ctx, Reduce op, const Tensor& x, const Tensor& out) {
  check_float_input("tensor_reduce", "x", x);
  check_on_device("tensor_reduce", "out", out);
  LW_CHECK(out.dtype() == DType::f32 && out.numel() == 1,
           "tensor_reduce: out " << out.describe() << " must be a single f32 element");
  Tensor partials = ctx.empty({kernels::tensor_reduce_partials()}, DType::f32);
  dispatch_float(x.dtype(), "tensor_reduce", [&]<class T>() {
    kernels::tensor_reduce<T>(op, x.data<T>(), x.numel(), partials.data<float>(), out.data<float>(), ctx.warp_size(),
                              ctx.stream().get());
  });
}

}  // namespace lw::ops
