#include "ops/check.h"

namespace lw::ops {

void check_on_device(const char* op, const char* name, const Tensor& t) {
  LW_CHECK(t.defined(), op << ": " << name << " is an undefined tensor");
  LW_CHECK(t.device() == Device::gpu, op << ": " << name << " " << t.describe() << " must be on the device");
}

void check_float(const char* op, const char* name, const Tensor& t) {
  LW_CHECK(is_float(t.dtype()), op << ": " << name << " " << t.describe() << " must be f32, f16 or bf16");
}

void check_float_input(const char* op, const char* name, const Tensor& t) {
  check_on_device(op, name, t);
  check_float(op, name, t);
  LW_CHECK(t.is_contiguous(), op << ": " << name << " " << t.describe() << " must be contiguous");
}

void check_same_shape(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b) {
  LW_CHECK(a.shape() == b.shape(),
           op << ": shapes differ: " << name_a << " " << a.describe() << ", " << name_b << " " << b.describe());
}

void check_same_dtype(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b) {
  LW_CHECK(a.dtype() == b.dtype(),
           op << ": dtypes differ: " << name_a << " " << a.describe() << ", " << name_b << " " << b.describe());
}

void check_slot_mapping(const char* op, const Tensor& slot_mapping, int64_t tokens) {
  check_on_device(op, "slot_mapping", slot_mapping);
  LW_CHECK(slot_mapping.dtype() == DType::i64 && slot_mapping.dim() == 1 && slot_mapping.size(0) == tokens &&
               slot_mapping.is_contiguous(),
           op << ": slot_mapping " << slot_mapping.describe() << " must be a contiguous i64[" << tokens << "]");
}

}  // namespace lw::ops
