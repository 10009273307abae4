// Argument checks and dtype dispatch shared by the ops' entry points.
#pragma once
#include <utility>

#include "core/tensor.h"

namespace lw::ops {

void check_on_device(const char* op, const char* name, const Tensor& t);
void check_float(const char* op, const char* name, const Tensor& t);
// Defined, on the device, contiguous, float dtype.
void check_float_input(const char* op, const char* name, const Tensor& t);
void check_same_shape(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b);
void check_same_dtype(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b);
// A KV cache's slot mapping: on the device, a contiguous i64 [tokens].
void check_slot_mapping(const char* op, const Tensor& slot_mapping, int64_t tokens);

// Calls f.template operator()<T>() with T the C++ type of a float dtype.
template <class F>
decltype(auto) dispatch_float(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::f32: return std::forward<F>(f).template operator()<float>();
    case DType::f16: return std::forward<F>(f).template operator()<half>();
    case DType::bf16: return std::forward<F>(f).template operator()<bfloat16>();
    default: LW_FAIL(op << ": unsupported dtype " << dtype_name(dt) << "; expected f32, f16 or bf16");
  }
}

}  // namespace lw::ops
