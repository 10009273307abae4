#include "ops/quant.h"

#include "kernels/quant/quantize.h"
#include "ops/check.h"

namespace lw::ops {

namespace {

// Checks the shapes of a quantised pair and returns {rows, cols}.
std::pair<int64_t, int64_t> check_pair(const char* op, const Tensor& x, const Tensor& q, const Tensor& scales,
                                       int group) {
  check_float_input(op, "x", x);
  check_on_device(op, "q", q);
  check_on_device(op, "scales", scales);
  LW_CHECK(x.dim() == 2, op << ": " << x.describe() << " must be 2-D [rows, cols]");
  const int64_t rows = x.size(0), cols = x.size(1);
  LW_CHECK(q.dtype() == DType::i8 && q.shape() == x.shape() && q.is_contiguous(),
           op << ": q " << q.describe() << " must be a contiguous i8" << shape_str(x.shape()));
  if (group == 0) {
    LW_CHECK(scales.dtype() == DType::f32 && scales.dim() == 1 && scales.size(0) == rows && scales.is_contiguous(),
             op << ": scales " << scales.describe() << " must be a contiguous f32[" << rows << "]");
  } else {
    LW_CHECK(group == 32 || group == 64 || group == 128, op << ": group " << group << " must be 32, 64 or 128");
    LW_CHECK(cols % group == 0, op << ": group " << group << " does not divide the " << cols << " columns");
    LW_CHECK(scales.dtype() == DType::f32 && scales.dim() == 2 && scales.size(0) == rows &&
                 scales.size(1) == cols / group && scales.is_contiguous(),
             op << ": scales " << scales.describe() << " must be a contiguous f32[" << rows << ", " << cols / group << "]");
  }
  return {rows, cols};
}

}  // namespace

void quantize_per_token(Context& ctx, const Tensor& x, const Tensor& q, const Tensor& scales) {
  auto [rows, cols] = check_pair("quantize_per_token", x, q, scales, 0);
  dispatch_float(x.dtype(), "quantize_per_token", [&]<class T>() {
    kernels::quantize_per_token<T>(x.data<T>(), q.data<int8_t>(), scales.data<float>(), rows, cols, ctx.warp_size(),
                                   ctx.stream().get());
  });
}

void dequantize_per_token(Context& ctx, const Tensor& q, const Tensor& scales, const Tensor& out) {
  auto [rows, cols] = check_pair("dequantize_per_token", out, q, scales, 0);
  dispatch_float(out.dtype(), "dequantize_per_token", [&]<class T>() {
    kernels::dequantize_per_token<T>(q.data<int8_t>(), scales.data<float>(), out.data<T>(), rows, cols, ctx.warp_size(),
                                     ctx.stream().get());
  });
}

void quantize_per_group(Context& ctx, const Tensor& x, int group, const Tensor& q, const Tensor& scales) {
  auto [rows, cols] = check_pair("quantize_per_group", x, q, scales, group);
  dispatch_float(x.dtype(), "quantize_per_group", [&]<class T>() {
    kernels::quantize_per_group<T>(x.data<T>(), q.data<int8_t>(), scales.data<float>(), rows, cols, group,
                                   ctx.warp_size(), ctx.stream().get());
  });
}

void dequantize_per_group(Context& ctx, const Tensor& q, const Tensor& scales, int group, const Tensor& out) {
  auto [rows, cols] = check_pair("dequantize_per_group", out, q, scales, group);
  dispatch_float(out.dtype(), "dequantize_per_group", [&]<class T>() {
    kernels::dequantize_per_group<T>(q.data<int8_t>(), scales.data<float>(), out.data<T>(), rows, cols, group,
                                     ctx.warp_size(), ctx.stream().get());
  });
}

void quantize_fp8(Context& ctx, const Tensor& x, int64_t group, const Tensor& q, const Tensor& scales) {
  const char* op = "quantize_fp8";
  check_float_input(op, "x", x);
  check_on_device(op, "q", q);
  check_on_device(op, "scales", scales);
  LW_CHECK(x.dim() == 2 && x.is_contiguous(), op << ": x " << x.describe() << " must be contiguous 2-D [rows, cols]");
  const int64_t rows = x.size(0), cols = x.size(1);
  LW_CHECK(group > 0 && cols % group == 0, op << ": group " << group << " must be positive and divide the " << cols
                                              << " columns of x " << x.describe());
  LW_CHECK(q.dtype() == DType::i8 && q.shape() == x.shape() && q.is_contiguous(),
           op << ": q " << q.describe() << " must be a contiguous i8" << shape_str(x.shape()));
  LW_CHECK(scales.dtype() == DType::f32 && scales.dim() == 2 && scales.size(0) == cols / group &&
               scales.size(1) >= rows && scales.is_contiguous(),
           op << ": scales " << scales.describe() << " must be a contiguous f32 [" << cols / group << ", >= " << rows << "]");
  dispatch_float(x.dtype(), op, [&]<class T>() {
    kernels::quantize_fp8<T>(x.data<T>(), static_cast<uint8_t*>(q.data_ptr()), scales.data<float>(), scales.size(1), rows,
                             cols, group, ctx.warp_size(), ctx.stream().get());
  });
}

void dequantize(Context& ctx, const Tensor& raw, BlockFormat format, const Tensor& out) {
  const char* op = "dequantize";
  check_float_input(op, "out", out);
  check_on_device(op, "raw", raw);
  const int64_t n = out.numel(), block = block_format_elems(format);
  LW_CHECK(n % block == 0, op << ": out " << out.describe() << " holds " << n << " elements, not whole "
                              << block_format_name(format) << " blocks of " << block);
  const int64_t bytes = n / block * block_format_bytes(format);
  LW_CHECK(raw.dtype() == DType::i8 && raw.dim() == 1 && raw.size(0) == bytes && raw.is_contiguous(),
           op << ": raw " << raw.describe() << " must be a contiguous i8[" << bytes << "]: the bytes of " << n
              << " elements stored as " << block_format_name(format));
  dispatch_float(out.dtype(), op, [&]<class T>() {
    kernels::dequantize_blocks<T>(out.data<T>(), raw.data_ptr(), format, n, ctx.warp_size(), ctx.stream().get());
  });
}

}  // namespace lw::ops
