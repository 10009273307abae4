// Threads per block of the row-wise kernels (one block per row): about four 16-byte vectors
// per thread, rounded to the warp, at most 1024. Measured on the H200 (docs/PERFORMANCE.md):
// light blocks that re-read the row from cache beat heavy blocks that keep it in registers.
// LW_ROW_VECS_PER_THREAD (1..16, read once) overrides the four, for tuning on other GPUs.
#pragma once
#include <cstdint>
#include <cstdlib>

#include "gpu/runtime.h"

namespace lw::kernels {

inline int row_threads(int64_t nvec, int warp_size) {
  static const int per_thread = [] {
    const char* env = std::getenv("LW_ROW_VECS_PER_THREAD");
    const int v = env ? std::atoi(env) : 4;
    return v < 1 ? 1 : v > 16 ? 16 : v;
  }();
  const int64_t want = (nvec + per_thread - 1) / per_thread;
  return gpu::round_block_size(static_cast<int>(want < 1024 ? want : 1024), warp_size);
}

}  // namespace lw::kernels
