// How a row-wise kernel (one block per row) spreads a row of `nvec` vectors over its threads,
// and whether the row fits in the threads' registers. Tuning knobs for benchmarks (read once):
//   LW_ROW_VECS_PER_THREAD  vectors per thread (1..8, default 8)
//   LW_ROW_CACHE            0: re-read the row from cache instead of keeping it in registers
#pragma once
#include <cstdint>
#include <cstdlib>

#include "gpu/runtime.h"

namespace lw::kernels {

inline constexpr int kRowCacheVectors = 8;  // the register cache of the row kernels

struct RowPlan {
  int threads;
  bool cached;
};

inline RowPlan row_plan(int64_t nvec, int warp_size) {
  static const int per_thread = [] {
    const char* env = std::getenv("LW_ROW_VECS_PER_THREAD");
    const int v = env ? std::atoi(env) : kRowCacheVectors;
    return v < 1 ? 1 : v > kRowCacheVectors ? kRowCacheVectors : v;
  }();
  static const bool allow_cache = [] {
    const char* env = std::getenv("LW_ROW_CACHE");
    return !(env && env[0] == '0');
  }();
  const int64_t want = (nvec + per_thread - 1) / per_thread;
  const int threads = gpu::round_block_size(static_cast<int>(want < 1024 ? want : 1024), warp_size);
  return {threads, allow_cache && nvec <= static_cast<int64_t>(threads) * kRowCacheVectors};
}

}  // namespace lw::kernels
