// Conversions between the storage types of kernels and the float they compute in.
#pragma once
#include "gpu/compat.h"

namespace lw::gpu {

LW_HOST_DEVICE __forceinline__ float to_float(float v) { return v; }
LW_HOST_DEVICE __forceinline__ float to_float(__half v) { return __half2float(v); }
LW_HOST_DEVICE __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
LW_HOST_DEVICE __forceinline__ T from_float(float v);
template <>
LW_HOST_DEVICE __forceinline__ float from_float<float>(float v) { return v; }
template <>
LW_HOST_DEVICE __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
LW_HOST_DEVICE __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

}  // namespace lw::gpu
