#include "ops/elementwise.h"

#include <cmath>

#include "ops/check.h"

namespace lw::ops {

namespace {

void binary(Context& ctx, const char* name, kernels::MapOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_float_input(name, "a", a);
  check_float_input(name, "b", b);
  check_float_input(name, "out", out);
  check_same_shape(name, "a", a, "b", b);
  check_same_shape(name, "a", a, "out", out);
  check_same_dtype(name, "a", a, "b", b);
  check_same_dtype(name, "a", a, "out", out);
  dispatch_float(a.dtype(), name, [&]<class T>() {
    kernels::map<T, T>(op, out.data<T>(), a.data<T>(), b.data<T>(), 0.0f, a.numel(), ctx.warp_size(),
                       ctx.stream().get());
  });
}

// Unary map from x's dtype to out's dtype.
void unary(Context& ctx, const char* name, kernels::MapOp op, const Tensor& x, float s, const Tensor& out) {
  check_float_input(name, "x", x);
  check_float_input(name, "out", out);
  check_same_shape(name, "x", x, "out", out);
  dispatch_float(x.dtype(), name, [&]<class TIn>() {
    dispatch_float(out.dtype(), name, [&]<class TOut>() {
      kernels::map<TOut, TIn>(op, out.data<TOut>(), x.data<TIn>(), nullptr, s, x.numel(), ctx.warp_size(),
                              ctx.stream().get());
    });
  });
}

}  // namespace

void add(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) { binary(ctx, "add", kernels::MapOp::add, a, b, out); }
void mul(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) { binary(ctx, "mul", kernels::MapOp::mul, a, b, out); }
void fill_uniform(Context& ctx, const Tensor& out, float lo, float hi, uint64_t seed) {
  check_float_input("fill_uniform", "out", out);
  LW_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "fill_uniform: bounds [" << lo << ", " << hi << ") are not a range");
  dispatch_float(out.dtype(), "fill_uniform", [&]<class T>() {
    kernels::fill_uniform<T>(out.data<T>(), out.numel(), lo, hi, seed, ctx.warp_size(), ctx.stream().get());
  });
}

void sigmoid_gated_add(Context& ctx, const Tensor& out, const Tensor& gate, const Tensor& x) {
  const char* op = "sigmoid_gated_add";
  check_float_input(op, "out", out);
  check_float_input(op, "gate", gate);
  check_float_input(op, "x", x);
  check_same_shape(op, "out", out, "x", x);
  check_same_dtype(op, "out", out, "x", x);
  check_same_dtype(op, "out", out, "gate", gate);
  LW_CHECK(out.dim() == 2 && gate.dim() == 2 && gate.size(0) == out.size(0) && gate.size(1) == 1,
           op << ": out " << out.describe() << " must be [tokens, hidden] and gate " << gate.describe() << " [tokens, 1]");
  dispatch_float(out.dtype(), op, [&]<class T>() {
    kernels::sigmoid_gated_add<T>(out.data<T>(), gate.data<T>(), x.data<T>(), out.size(0), out.size(1), ctx.warp_size(),
                                  ctx.stream().get());
  });
}

void residual_add(Context& ctx, const Tensor& residual, const Tensor& x) {
  binary(ctx, "residual_add", kernels::MapOp::add, residual, x, residual);
}

void scale(Context& ctx, const Tensor& x, float s, const Tensor& out) {
  LW_CHECK(std::isfinite(s), "scale: factor " << s << " is not finite");
  check_same_dtype("scale", "x", x, "out", out);
  unary(ctx, "scale", kernels::MapOp::scale, x, s, out);
}

void cast(Context& ctx, const Tensor& x, const Tensor& out) {
  LW_CHECK(x.dtype() == out.dtype() || !x.defined() || !out.defined() || x.data_ptr() != out.data_ptr(),
           "cast: out " << out.describe() << " must not share memory with x " << x.describe());
  unary(ctx, "cast", kernels::MapOp::copy, x, 0.0f, out);
}

void activation(Context& ctx, Activation act, const Tensor& x, const Tensor& out) {
  check_same_dtype("activation", "x", x, "out", out);
  const kernels::MapOp op = act == Activation::silu        ? kernels::MapOp::silu
                            : act == Activation::gelu_tanh ? kernels::MapOp::gelu_tanh
                                                           : kernels::MapOp::gelu_erf;
  unary(ctx, "activation", op, x, 0.0f, out);
}

void act_mul(Context& ctx, Activation act, const Tensor& in, const Tensor& out) {
  check_float_input("act_mul", "in", in);
  check_float_input("act_mul", "out", out);
  check_same_dtype("act_mul", "in", in, "out", out);
  LW_CHECK(in.dim() >= 1 && in.size(-1) % 2 == 0,
           "act_mul: in " << in.describe() << " must have an even last dimension (gate and up halves)");
  std::vector<int64_t> want = in.shape();
  want.back() /= 2;
  LW_CHECK(out.shape() == want, "act_mul: out " << out.describe() << " must have shape " << shape_str(want));
  const int64_t inter = want.back();
  const int64_t tokens = inter == 0 ? 0 : out.numel() / inter;
  dispatch_float(in.dtype(), "act_mul", [&]<class T>() {
    kernels::act_mul<T>(act, out.data<T>(), in.data<T>(), tokens, inter, ctx.warp_size(), ctx.stream().get());
  });
}

}  // namespace lw::ops
