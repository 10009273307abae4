// Approximate arithmetic in one hardware instruction where the target has one, for kernels
// whose results do not need the library's last bits (the attention kernels' online softmax).
#pragma once
#include <cmath>

#include "gpu/compat.h"

namespace lw::gpu {

// 2^x within 2 ulp (NVIDIA ex2.approx.ftz, AMD v_exp_f32); results below 2^-126 may flush to
// zero, which a softmax weight never notices beside its row's maximum (weight 1). The
// library's exp2f spends three more instructions on those subnormal results. exp2(-inf) = 0.
LW_DEVICE_INLINE float exp2_approx(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#elif defined(__HIP_DEVICE_COMPILE__)
  return __builtin_amdgcn_exp2f(x);
#else
  return exp2f(x);
#endif
}

}  // namespace lw::gpu
