#include "ops/elementwise.h"

#include "kernels/elementwise.h"
#include "ops/check.h"

namespace lw::ops {

void add(Context& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"a", &a}, {"b", &b}, {"out", &out}}) {
    check_on_device("add", name, *t);
    check_float("add", name, *t);
    LW_CHECK(t->is_contiguous(), "add: " << name << " " << t->describe() << " must be contiguous");
  }
  LW_CHECK(a.shape() == b.shape() && a.shape() == out.shape(),
           "add: shapes differ: a " << a.describe() << ", b " << b.describe() << ", out " << out.describe());
  LW_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype(),
           "add: dtypes differ: a " << a.describe() << ", b " << b.describe() << ", out " << out.describe());
  const int64_t n = a.numel();
  cudaStream_t s = ctx.stream().get();
  switch (a.dtype()) {
    case DType::f32: kernels::add(a.data<float>(), b.data<float>(), out.data<float>(), n, ctx.warp_size(), s); break;
    case DType::f16: kernels::add(a.data<half>(), b.data<half>(), out.data<half>(), n, ctx.warp_size(), s); break;
    case DType::bf16:
      kernels::add(a.data<bfloat16>(), b.data<bfloat16>(), out.data<bfloat16>(), n, ctx.warp_size(), s);
      break;
    default: LW_FAIL("add: unsupported dtype " << dtype_name(a.dtype()));
  }
}

}  // namespace lw::ops
