#include "ops/reduce.h"

#include "kernels/reduce.h"
#include "ops/check.h"

namespace lw::ops {

void row_sum(Context& ctx, const Tensor& x, const Tensor& out) {
  check_on_device("row_sum", "x", x);
  check_on_device("row_sum", "out", out);
  check_float("row_sum", "x", x);
  LW_CHECK(x.dim() == 2, "row_sum: x " << x.describe() << " must be 2-D [rows, cols]");
  LW_CHECK(x.stride(1) == 1 || x.size(1) <= 1, "row_sum: x " << x.describe() << " must have contiguous rows");
  LW_CHECK(out.dtype() == DType::f32 && out.dim() == 1 && out.size(0) == x.size(0) && out.is_contiguous(),
           "row_sum: out " << out.describe() << " must be a contiguous f32[" << x.size(0) << "]");
  const int64_t rows = x.size(0), cols = x.size(1), stride = x.stride(0);
  cudaStream_t s = ctx.stream().get();
  switch (x.dtype()) {
    case DType::f32: kernels::row_sum(x.data<float>(), out.data<float>(), rows, cols, stride, ctx.warp_size(), s); break;
    case DType::f16: kernels::row_sum(x.data<half>(), out.data<float>(), rows, cols, stride, ctx.warp_size(), s); break;
    case DType::bf16:
      kernels::row_sum(x.data<bfloat16>(), out.data<float>(), rows, cols, stride, ctx.warp_size(), s);
      break;
    default: LW_FAIL("row_sum: unsupported dtype " << dtype_name(x.dtype()));
  }
}

}  // namespace lw::ops
