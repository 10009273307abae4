#include "ops/check.h"

namespace lw::ops {

void check_on_device(const char* op, const char* name, const Tensor& t) {
  LW_CHECK(t.defined(), op << ": " << name << " is an undefined tensor");
  LW_CHECK(t.device() == Device::gpu, op << ": " << name << " " << t.describe() << " must be on the device");
}

void check_float(const char* op, const char* name, const Tensor& t) {
  LW_CHECK(is_float(t.dtype()), op << ": " << name << " " << t.describe() << " must be f32, f16 or bf16");
}

}  // namespace lw::ops
