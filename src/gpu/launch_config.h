// The shape of a kernel launch and its validation; host-compiler safe (no <<< >>>).
#pragma once
#include <cstddef>

#include "gpu/runtime.h"

namespace lw::gpu {

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
};

// Throws lw::Error naming the kernel when the configuration cannot be launched.
void check_launch_config(const char* kernel, const LaunchConfig& cfg);

}  // namespace lw::gpu
