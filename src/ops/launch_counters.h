// Counters for kernels whose last block to finish completes the launch's work (a split's
// partial results added by the last of its blocks: kernels/attention_decode_matrix.cu,
// kernels/quant/int4.cu). Zeroed once; every launch that uses them leaves them zero again, so
// launches on the context's stream share them one after another. Made on the context's first
// use, an eager step: decode graphs capture later steps.
#pragma once
#include <cstdint>

#include "base/error.h"
#include "core/context.h"
#include "gpu/runtime.h"

namespace lw::ops {

class LaunchCounters {
 public:
  static constexpr int64_t kCount = int64_t{1} << 16;
  explicit LaunchCounters(Context& ctx) : counters_(ctx.empty({kCount}, DType::i32)) {
    LW_CUDA_CHECK(cudaMemsetAsync(counters_.data_ptr(), 0, counters_.nbytes(), ctx.stream().get()));
  }
  // n counters, or null where there are not enough (the kernel then finishes in a second launch).
  int32_t* get(int64_t n) { return n <= kCount ? counters_.data<int32_t>() : nullptr; }

 private:
  Tensor counters_;
};

}  // namespace lw::ops
