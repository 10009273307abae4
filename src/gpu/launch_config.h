// The shape of a kernel launch and its validation; host-compiler safe (no <<< >>>).
#pragma once
#include <cstddef>

#include "gpu/runtime.h"

namespace lw::gpu {

// Every field is given: a launch that named no stream would go to the legacy default stream,
// which does not order with the context's non-blocking stream.
//
// overlaps_prior: the kernel calls gpu::begin_after_prior_grid() first (gpu/launch.h), so it may
// be launched while the kernel before it on the stream is still running (NVIDIA's programmatic
// dependent launch, compute capability 9.0 and later; elsewhere an ordinary launch). Its blocks
// are then resident and waiting when that kernel ends, instead of being launched after it:
// a step of many small kernels (a decode step at batch 1) loses a launch latency per kernel.
struct LaunchConfig {
  LaunchConfig(dim3 g, dim3 b, size_t shared, cudaStream_t s, bool overlaps = false)
      : grid(g), block(b), shared_bytes(shared), stream(s), overlaps_prior(overlaps) {}
  dim3 grid;
  dim3 block;
  size_t shared_bytes;
  cudaStream_t stream;
  bool overlaps_prior;
};
inline constexpr bool kOverlapsPrior = true;

// Whether `kernel`, launched with overlaps_prior on `stream`, goes out as a programmatic
// dependent launch: CUDA, a device of compute capability 9.0 or later, the kernel compiled for
// 9.0 or later (older code has no wait in it), the stream not being captured into a graph
// (graphs gain nothing from it: docs/PERFORMANCE.md), and LW_OVERLAPPED_LAUNCH not 0.
bool overlapped_launch(const void* kernel, cudaStream_t stream);

// Raises `kernel`'s limit of dynamic shared memory on the current device to `bytes` where its
// default (48 KiB less its static shared memory on NVIDIA, 48 KiB on AMD) is below: the limit is
// the kernel's, so it only ever rises (a launch of fewer bytes leaves it). Use through
// allow_dynamic_shared (gpu/launch.h).
void raise_dynamic_shared_limit(const void* kernel, size_t bytes);

// Throws lw::Error naming the kernel when the configuration cannot be launched.
void check_launch_config(const char* kernel, const LaunchConfig& cfg);

}  // namespace lw::gpu
