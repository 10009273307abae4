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
//
// cluster_y: the blocks of each grid column (grid.y of them, a multiple of cluster_y) launched in
// thread-block clusters of cluster_y blocks along y, whose shared memory each block of the
// cluster may read (NVIDIA compute capability 9.0 and later); at most most_cluster_blocks(),
// which is 1 (no clusters) elsewhere.
inline constexpr unsigned kMostClusterBlocks = 8;  // NVIDIA's portable cluster sizes
struct LaunchConfig {
  LaunchConfig(dim3 g, dim3 b, size_t shared, cudaStream_t s, bool overlaps = false)
      : grid(g), block(b), shared_bytes(shared), stream(s), overlaps_prior(overlaps) {}
  dim3 grid;
  dim3 block;
  size_t shared_bytes;
  cudaStream_t stream;
  bool overlaps_prior;
  unsigned cluster_y = 1;
};
inline constexpr bool kOverlapsPrior = true;

// Whether `kernel`, launched with overlaps_prior on `stream`, goes out as a programmatic
// dependent launch: CUDA, a device of compute capability 9.0 or later, the kernel compiled for
// 9.0 or later (older code has no wait in it), the stream not being captured into a graph
// (graphs gain nothing from it: docs/PERFORMANCE.md), and LW_OVERLAPPED_LAUNCH not 0.
bool overlapped_launch(const void* kernel, cudaStream_t stream);

// The most blocks `kernel` may take in a cluster along y (LaunchConfig::cluster_y) for `cfg`'s
// block and shared memory: up to 8 (NVIDIA's portable sizes) on CUDA devices of compute
// capability 9.0 and later where the kernel is compiled for 9.0 or later and a cluster of that
// many fits the device; 1 elsewhere, or with LW_SPLIT_CLUSTERS=0. Asked once per kernel, device
// and shape. (Clusters of 11 and 16 blocks, non-portable sizes, made the int4 GEMV's splits 50%
// slower on the H100: docs/PERFORMANCE.md.)
int most_cluster_blocks(const void* kernel, const LaunchConfig& cfg);

// Raises `kernel`'s limit of dynamic shared memory on the current device to `bytes` where its
// default (48 KiB less its static shared memory on NVIDIA, 48 KiB on AMD) is below: the limit is
// the kernel's, so it only ever rises (a launch of fewer bytes leaves it). Use through
// allow_dynamic_shared (gpu/launch.h).
void raise_dynamic_shared_limit(const void* kernel, size_t bytes);

// Throws lw::Error naming the kernel when the configuration cannot be launched.
void check_launch_config(const char* kernel, const LaunchConfig& cfg);

}  // namespace lw::gpu
