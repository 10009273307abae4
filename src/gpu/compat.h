// The one header that maps CUDA spellings onto the target of this build:
//   LW_TARGET_CUDA  the CUDA toolkit itself;
//   LW_TARGET_HIP   HIP/ROCm (runtime API, half types, warp intrinsics with masks dropped);
//   LW_TARGET_HOST  the host SIMT emulator (lw_simt).
// Kernel and host code write CUDA C++ and include this header (directly or through the
// toolkit-named shims of the HIP build). Code outside gpu/ that must differ per target asks
// this header instead of testing LW_TARGET_*: lw::gpu::kTarget / kEmulator (with `if constexpr`
// or a plain `if`, when both branches compile everywhere) or a capability macro (LW_GPU_GRAPHS,
// when one branch names an API a target lacks); the build system's LW_HAVE_NCCL says whether
// NCCL / RCCL is there (never on the emulator).
// The files outside gpu/ that still test LW_TARGET_*, and why:
//   ops/vendor_gemm_lt.cpp   one binding for cuBLASLt and hipBLASLt (through the cublasLt.h
//                            shim), whose APIs differ: hipBLASLt has no minimum-alignment or
//                            reduction-scheme preferences and no cublasLtMatmulAlgoCheck;
//   tests/test_engine.cpp    turns the emulator's sanitizer off (lw_simt/emulator.h exists
//                            on the host target only);
//   tests/test_gemm.cpp,     expectations per target: which GEMM paths exist, how the vendor
//   tests/test_parallel.cpp  path rounds the bias, whether ranks are threads of the emulator.
#pragma once

#if defined(LW_TARGET_HOST)
#include <lw_simt/simt.h>
#define LW_DEVICE_CODE 1
#elif defined(LW_TARGET_HIP)
#include "gpu/compat_hip.h"
#elif defined(LW_TARGET_CUDA)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#else
#error "Define one of LW_TARGET_CUDA, LW_TARGET_HIP, LW_TARGET_HOST (the build system does)"
#endif

// True inside code that is compiled for the device (and always on the emulator).
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define LW_DEVICE_CODE 1
#endif

// Stream capture and graph replay (cudaGraph_t, cudaStreamBeginCapture, ...): CUDA and HIP
// have them, the emulator does not.
#if !defined(LW_TARGET_HOST)
#define LW_GPU_GRAPHS 1
#endif

#define LW_HOST_DEVICE __host__ __device__
#define LW_DEVICE_INLINE __device__ __forceinline__

namespace lw {
using half = __half;
using bfloat16 = __nv_bfloat16;
}  // namespace lw

namespace lw::gpu {

// The physical warp size of the code being compiled. Use it inside kernel bodies only, never
// as a kernel template argument: a HIP build compiles the host side once (with the largest
// size, 64) and the device side once per architecture (64 on gfx9 CDNA, 32 on RDNA).
#if defined(LW_TARGET_HOST)
#if LW_SIMT_DEVICE_API  // not in host-only sources (lw_simt/types.h)
inline constexpr int kWarpSize = LW_WARP_SIZE;
#endif
#elif defined(LW_TARGET_HIP)
#if defined(__GFX9__) || !defined(__HIP_DEVICE_COMPILE__)
inline constexpr int kWarpSize = 64;
#else
inline constexpr int kWarpSize = 32;
#endif
#else
inline constexpr int kWarpSize = 32;
#endif

// Proof at compile time that each AMD architecture gets its wavefront size.
#if defined(LW_TARGET_HIP) && defined(__HIP_DEVICE_COMPILE__)
#if defined(__gfx90a__) || defined(__gfx942__)
static_assert(kWarpSize == 64, "CDNA (gfx90a, gfx942) runs 64-lane wavefronts");
#elif defined(__gfx1100__)
static_assert(kWarpSize == 32, "RDNA3 (gfx1100) runs 32-lane wavefronts");
#endif
#endif

// The target of this build as a value, for host code that branches on it.
enum class Target { cuda, hip, host };
#if defined(LW_TARGET_HOST)
inline constexpr Target kTarget = Target::host;
#elif defined(LW_TARGET_HIP)
inline constexpr Target kTarget = Target::hip;
#else
inline constexpr Target kTarget = Target::cuda;
#endif
// The emulator: device memory is host memory (the CPU may read and write it directly), and
// there are no graphs and no NCCL.
inline constexpr bool kEmulator = kTarget == Target::host;

inline constexpr int kMaxBlockThreads = 1024;
#if !defined(LW_TARGET_HOST) || LW_SIMT_DEVICE_API
inline constexpr int kMaxWarpsPerBlock = kMaxBlockThreads / kWarpSize;
#endif

}  // namespace lw::gpu

// Shared memory, declared through LW_SHARED / LW_DYNAMIC_SHARED in kernel code so that the
// emulator's sanitizer can check every access (lw_simt/portable.h, which the emulator installs
// for other projects too). On CUDA and HIP they are plain shared memory.
#if defined(LW_TARGET_HOST)
#include "lw_simt/portable.h"
#else
#define LW_SHARED(T, name, dims) __shared__ T name dims
#define LW_DYNAMIC_SHARED(T, name)                                              \
  extern __shared__ __attribute__((aligned(16))) unsigned char lw_dyn_smem_[]; \
  T* name = reinterpret_cast<T*>(lw_dyn_smem_)
#endif
