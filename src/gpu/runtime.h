// Host-side view of the GPU runtime for every target: the CUDA runtime API spellings (through
// gpu/compat.h), the checked-call macro, and run-time facts about the device.
#pragma once
#include "gpu/compat.h"
#include "gpu/error.h"

#if defined(LW_TARGET_HIP)
#define LW_GPU_VENDOR "HIP"
#elif defined(LW_TARGET_HOST)
#define LW_GPU_VENDOR "SIMT emulator"
#else
#define LW_GPU_VENDOR "CUDA"
#endif

// LW_CUDA_CHECK(cudaMalloc(&p, n)): throws lw::Error with the runtime's error name and message.
#define LW_CUDA_CHECK(expr)                                                                             \
  do {                                                                                                  \
    const cudaError_t lw_err_ = (expr);                                                                 \
    if (lw_err_ != cudaSuccess) {                                                                       \
      (void)cudaGetLastError(); /* clear the sticky copy of a non-fatal error */                        \
      ::lw::detail::throw_vendor_error(__FILE__, __LINE__, #expr, LW_GPU_VENDOR,                        \
                                       cudaGetErrorName(lw_err_), cudaGetErrorString(lw_err_));         \
    }                                                                                                   \
  } while (0)

namespace lw::gpu {

// The name of this build's target: "cuda", "hip" or "host".
const char* target_name();

int device_count();

// The warp size of `device`, read from the device at run time (a HIP binary can hold code
// for 64-lane gfx9 and 32-lane gfx11 at once, so this is not a compile-time fact on the host).
int warp_size(int device);

// Smallest multiple of warp_size that is >= threads (and >= one warp).
int round_block_size(int threads, int warp_size);

}  // namespace lw::gpu
