// The one way kernels are launched: lw::gpu::launch(name, kernel, config, args...). It checks
// the configuration before the launch and the launch error after it, and on the host target
// runs the kernel on the SIMT emulator. Include from kernel (.cu) files only.
#pragma once
#include <utility>

#include "gpu/launch_config.h"

namespace lw::gpu {

// Lets `kernel` take `bytes` of dynamic shared memory: past the 48 KiB every kernel gets,
// NVIDIA and AMD need the kernel's limit raised first (a no-op below it and on the emulator).
template <class... KArgs>
void allow_dynamic_shared(void (*kernel)(KArgs...), size_t bytes) {
  constexpr size_t kDefault = 48 * 1024;
  if (bytes <= kDefault) return;
  LW_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <class... KArgs, class... Args>
void launch(const char* name, void (*kernel)(KArgs...), const LaunchConfig& cfg, Args&&... args) {
  check_launch_config(name, cfg);
#if defined(LW_TARGET_HOST)
  try {
    ::lw::simt::run(name, kernel, cfg.grid, cfg.block, cfg.shared_bytes, std::forward<Args>(args)...);
  } catch (const ::lw::simt::KernelError& e) {
    LW_FAIL("kernel " << name << " failed on the SIMT emulator:\n" << e.what());
  }
#else
  kernel<<<cfg.grid, cfg.block, cfg.shared_bytes, cfg.stream>>>(std::forward<Args>(args)...);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    ::lw::detail::throw_vendor_error(__FILE__, __LINE__, name, LW_GPU_VENDOR " launch", cudaGetErrorName(err),
                                     cudaGetErrorString(err));
  }
#endif
}

}  // namespace lw::gpu
