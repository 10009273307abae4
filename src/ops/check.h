// Argument checks shared by the ops' entry points.
#pragma once
#include "core/tensor.h"

namespace lw::ops {

void check_on_device(const char* op, const char* name, const Tensor& t);
void check_float(const char* op, const char* name, const Tensor& t);

}  // namespace lw::ops
