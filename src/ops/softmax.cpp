#include "ops/softmax.h"

#include <cmath>

#include "kernels/softmax.h"
#include "ops/check.h"

namespace lw::ops {

namespace {

void run_softmax(Context& ctx, const char* op, bool log, const Tensor& x, const Tensor& out, float temperature) {
  check_float_input(op, "x", x);
  check_float_input(op, "out", out);
  check_same_shape(op, "x", x, "out", out);
  LW_CHECK(x.dim() >= 1, op << ": x " << x.describe() << " needs a last dimension");
  LW_CHECK(out.dtype() == x.dtype() || out.dtype() == DType::f32,
           op << ": out " << out.describe() << " must be " << dtype_name(x.dtype()) << " or f32");
  LW_CHECK(std::isfinite(temperature) && temperature > 0,
           op << ": temperature " << temperature << " must be finite and > 0");
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  dispatch_float(x.dtype(), op, [&]<class TIn>() {
    if (out.dtype() == DType::f32) {
      kernels::softmax<float, TIn>(out.data<float>(), x.data<TIn>(), temperature, log, rows, cols, ctx.warp_size(),
                                   ctx.stream().get());
    } else {
      kernels::softmax<TIn, TIn>(out.data<TIn>(), x.data<TIn>(), temperature, log, rows, cols, ctx.warp_size(),
                                 ctx.stream().get());
    }
  });
}

}  // namespace

void softmax(Context& ctx, const Tensor& x, const Tensor& out, float temperature) {
  run_softmax(ctx, "softmax", false, x, out, temperature);
}
void log_softmax(Context& ctx, const Tensor& x, const Tensor& out, float temperature) {
  run_softmax(ctx, "log_softmax", true, x, out, temperature);
}

}  // namespace lw::ops
