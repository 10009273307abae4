// Copies between tensor views of any strides, with float type conversion.
#pragma once
#include <vector>

#include "core/context.h"
#include "core/tensor.h"

namespace lw::ops {

// dst = src (same shape, rank <= 6, float dtypes, on the device, any strides: a transpose,
// a slice of a fused tensor, a non-contiguous view). dst must not overlap src.
void copy(Context& ctx, const Tensor& src, const Tensor& dst);

// A new contiguous tensor with the contents of src.
Tensor contiguous(Context& ctx, const Tensor& src);

// Concatenation along dimension dim into a new contiguous tensor.
Tensor concat(Context& ctx, const std::vector<Tensor>& parts, int dim);

// Contiguous tensors of one dtype (any, integers too) and one shape past dimension 0, one after
// another along it: their bytes in order.
Tensor stack_rows(Context& ctx, const std::vector<Tensor>& parts);

}  // namespace lw::ops
