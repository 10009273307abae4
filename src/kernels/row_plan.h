// Threads per block of the row-wise kernels (one block per row), rounded to the warp, at most
// 1024. A launch of few vectors in all (a decode step's rows: blocks x vectors <= kRowFewVectors)
// gives each thread one 16-byte vector, so that every load of the row is in flight at once on
// the few multiprocessors it occupies; larger launches (prefill) give each thread about four,
// since there light blocks that re-read the row from cache beat heavy ones that keep it in
// registers, and more resident rows beat wider blocks (measured on the H200:
// docs/PERFORMANCE.md). LW_ROW_VECS_PER_THREAD (1..16, read once) sets the vectors per thread
// at every size, for tuning on other GPUs.
#pragma once
#include <cstdint>
#include <cstdlib>

#include "gpu/runtime.h"

namespace lw::kernels {

inline constexpr int64_t kRowFewVectors = int64_t{1} << 17;  // 2 MiB of 16-byte vectors
inline constexpr int kRowVecsPerThread = 4;

// `blocks` rows (blocks) of `nvec` vectors (or elements, for unaligned rows) each; `forced` > 0
// sets the vectors per thread at every size.
inline int row_threads_with(int64_t nvec, int64_t blocks, int warp_size, int forced) {
  const int per_thread = forced > 0 ? forced : blocks * nvec <= kRowFewVectors ? 1 : kRowVecsPerThread;
  const int64_t want = (nvec + per_thread - 1) / per_thread;
  return gpu::round_block_size(static_cast<int>(want < 1024 ? want : 1024), warp_size);
}

// row_threads_with the count LW_ROW_VECS_PER_THREAD forces (1..16, read once), if set.
inline int row_threads(int64_t nvec, int64_t blocks, int warp_size) {
  static const int forced = [] {
    const char* env = std::getenv("LW_ROW_VECS_PER_THREAD");
    if (!env) return 0;
    const int v = std::atoi(env);
    return v < 1 ? 1 : v > 16 ? 16 : v;
  }();
  return row_threads_with(nvec, blocks, warp_size, forced);
}

}  // namespace lw::kernels
