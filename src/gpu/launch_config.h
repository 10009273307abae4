// The shape of a kernel launch and its validation; host-compiler safe (no <<< >>>).
#pragma once
#include <cstddef>

#include "gpu/runtime.h"

namespace lw::gpu {

// Every field is given: a launch that named no stream would go to the legacy default stream,
// which does not order with the context's non-blocking stream.
struct LaunchConfig {
  LaunchConfig(dim3 g, dim3 b, size_t shared, cudaStream_t s) : grid(g), block(b), shared_bytes(shared), stream(s) {}
  dim3 grid;
  dim3 block;
  size_t shared_bytes;
  cudaStream_t stream;
};

// Throws lw::Error naming the kernel when the configuration cannot be launched.
void check_launch_config(const char* kernel, const LaunchConfig& cfg);

}  // namespace lw::gpu
