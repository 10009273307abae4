// The one way kernels are launched: lw::gpu::launch(name, kernel, config, args...). It checks
// the configuration before the launch and the launch error after it, and on the host target
// runs the kernel on the SIMT emulator. Include from kernel (.cu) files only.
#pragma once
#include <string>
#include <utility>

#include "gpu/launch_config.h"

namespace lw::gpu {

// Lets `kernel` take `bytes` of dynamic shared memory: past the 48 KiB every kernel gets (its
// static shared memory included), NVIDIA and AMD need the kernel's limit raised first (a no-op
// below it and on the emulator).
template <class... KArgs>
void allow_dynamic_shared(void (*kernel)(KArgs...), size_t bytes) {
  raise_dynamic_shared_limit(reinterpret_cast<const void*>(kernel), bytes);
}

// First in a kernel launched with LaunchConfig::overlaps_prior: waits until the kernel before it
// on the stream has finished and its writes are visible, then lets the next overlapping kernel
// be launched. Every thread calls it before it reads or writes global memory. A no-op where
// launches do not overlap (HIP, the emulator, devices before compute capability 9.0).
LW_DEVICE_INLINE void begin_after_prior_grid() {
#if defined(LW_TARGET_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// What a failed launch names: the kernel and its configuration.
inline std::string describe_launch(const char* name, const LaunchConfig& cfg) {
  return std::string(name) + " (grid " + std::to_string(cfg.grid.x) + "," + std::to_string(cfg.grid.y) + "," +
         std::to_string(cfg.grid.z) + ", block " + std::to_string(cfg.block.x * cfg.block.y * cfg.block.z) + ", " +
         std::to_string(cfg.shared_bytes) + " bytes of dynamic shared memory" +
         (cfg.cluster_y > 1 ? ", clusters of " + std::to_string(cfg.cluster_y) + " blocks" : std::string()) + ")";
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
#if defined(LW_TARGET_CUDA)
  const bool overlapped = cfg.overlaps_prior && overlapped_launch(reinterpret_cast<const void*>(kernel), cfg.stream);
  if (overlapped || cfg.cluster_y > 1) {
    cudaLaunchAttribute attribute[2];
    unsigned attributes = 0;
    if (overlapped) {
      attribute[attributes].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attribute[attributes++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cfg.cluster_y > 1) {
      attribute[attributes].id = cudaLaunchAttributeClusterDimension;
      attribute[attributes].val.clusterDim.x = 1;
      attribute[attributes].val.clusterDim.y = cfg.cluster_y;
      attribute[attributes++].val.clusterDim.z = 1;
    }
    cudaLaunchConfig_t lc{};
    lc.gridDim = cfg.grid;
    lc.blockDim = cfg.block;
    lc.dynamicSmemBytes = cfg.shared_bytes;
    lc.stream = cfg.stream;
    lc.attrs = attribute;
    lc.numAttrs = attributes;
    const cudaError_t err = cudaLaunchKernelEx(&lc, kernel, std::forward<Args>(args)...);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      ::lw::detail::throw_vendor_error(__FILE__, __LINE__, describe_launch(name, cfg).c_str(), "CUDA launch", cudaGetErrorName(err),
                                       cudaGetErrorString(err));
    }
    return;
  }
#endif
  kernel<<<cfg.grid, cfg.block, cfg.shared_bytes, cfg.stream>>>(std::forward<Args>(args)...);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    ::lw::detail::throw_vendor_error(__FILE__, __LINE__, describe_launch(name, cfg).c_str(), LW_GPU_VENDOR " launch",
                                     cudaGetErrorName(err), cudaGetErrorString(err));
  }
#endif
}

}  // namespace lw::gpu
