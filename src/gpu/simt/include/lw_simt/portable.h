// Shared memory the emulator's sanitizer can check, in one kernel source for every target:
//   LW_SHARED(float, partial, [32][33]);   is  __shared__ float partial[32][33];
//   LW_DYNAMIC_SHARED(float, smem);        gives smem pointing at the dynamic shared memory
// Under nvcc or hipcc they are plain shared memory; compiled as C++ against the emulator they
// are checked views (uninitialised reads, races between barriers, indices out of bounds). One
// extern array per program for the dynamic form avoids CUDA's conflicting-type error when
// kernels of one file use different types.
#pragma once
#if defined(__CUDACC__) || defined(__HIPCC__)
#define LW_SHARED(T, name, dims) __shared__ T name dims
#define LW_DYNAMIC_SHARED(T, name)                                              \
  extern __shared__ __attribute__((aligned(16))) unsigned char lw_dyn_smem_[]; \
  T* name = reinterpret_cast<T*>(lw_dyn_smem_)
#else
#include "lw_simt/shared.h"
#define LW_SHARED(T, name, dims)                                                   \
  static thread_local ::lw::simt::SharedSlot<T dims> lw_shared_slot_##name{#name}; \
  const auto name = lw_shared_slot_##name.bind()
#define LW_DYNAMIC_SHARED(T, name) const auto name = ::lw::simt::dynamic_shared_ptr<T>()
#endif
