// A double rounded the way a kernel computing in float stores it in a float dtype.
#pragma once
#include "core/dtype.h"
#include "gpu/numeric.h"

namespace lw::test {

inline double round_to(DType dt, double v) {
  switch (dt) {
    case DType::f16: return gpu::to_float(gpu::from_float<half>(static_cast<float>(v)));
    case DType::bf16: return gpu::to_float(gpu::from_float<bfloat16>(static_cast<float>(v)));
    default: return static_cast<float>(v);
  }
}

}  // namespace lw::test
