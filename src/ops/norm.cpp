#include "ops/norm.h"

#include <cmath>

#include "kernels/norm.h"
#include "ops/check.h"

namespace lw::ops {

namespace {

void norm(Context& ctx, const char* op, bool layer, const Tensor& x, const Tensor* residual, const Tensor& weight,
          const Tensor& bias, float eps, const Tensor& out) {
  check_float_input(op, "x", x);
  check_float_input(op, "out", out);
  check_float_input(op, "weight", weight);
  LW_CHECK(x.dim() >= 1, op << ": x " << x.describe() << " needs a last (hidden) dimension");
  check_same_shape(op, "x", x, "out", out);
  check_same_dtype(op, "x", x, "out", out);
  check_same_dtype(op, "x", x, "weight", weight);
  const int64_t hidden = x.size(-1);
  LW_CHECK(weight.dim() == 1 && weight.size(0) == hidden,
           op << ": weight " << weight.describe() << " must be [" << hidden << "] to match x " << x.describe());
  if (bias.defined()) {
    check_float_input(op, "bias", bias);
    check_same_dtype(op, "x", x, "bias", bias);
    LW_CHECK(bias.dim() == 1 && bias.size(0) == hidden, op << ": bias " << bias.describe() << " must be [" << hidden << "]");
  }
  if (residual) {
    check_float_input(op, "residual", *residual);
    check_same_shape(op, "x", x, "residual", *residual);
    check_same_dtype(op, "x", x, "residual", *residual);
  }
  LW_CHECK(std::isfinite(eps) && eps >= 0, op << ": eps " << eps << " must be finite and >= 0");
  const int64_t rows = hidden == 0 ? 0 : x.numel() / hidden;
  dispatch_float(x.dtype(), op, [&]<class T>() {
    T* res = residual ? residual->data<T>() : nullptr;
    if (layer) {
      kernels::layer_norm<T>(out.data<T>(), x.data<T>(), weight.data<T>(), bias.defined() ? bias.data<T>() : nullptr,
                             res, eps, rows, hidden, ctx.warp_size(), ctx.stream().get());
    } else {
      kernels::rms_norm<T>(out.data<T>(), x.data<T>(), weight.data<T>(), res, eps, rows, hidden, ctx.warp_size(),
                           ctx.stream().get());
    }
  });
}

}  // namespace

void rms_norm(Context& ctx, const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  norm(ctx, "rms_norm", false, x, nullptr, weight, Tensor(), eps, out);
}

void add_rms_norm(Context& ctx, const Tensor& x, const Tensor& residual, const Tensor& weight, float eps, const Tensor& out) {
  norm(ctx, "add_rms_norm", false, x, &residual, weight, Tensor(), eps, out);
}

void layer_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, const Tensor& out) {
  norm(ctx, "layer_norm", true, x, nullptr, weight, bias, eps, out);
}

void add_layer_norm(Context& ctx, const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                    float eps, const Tensor& out) {
  norm(ctx, "add_layer_norm", true, x, &residual, weight, bias, eps, out);
}

}  // namespace lw::ops
