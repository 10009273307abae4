// Random GGML blocks of a quantised type: random bits with each block's fp16 scales (d, and the
// minimum where the format has one) set so that the weights are of size ~0.3, like a
// trained layer's. For benchmarks of named shapes with block weights and for tests: the values
// are arbitrary but finite, and every bit pattern of the quantised fields occurs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "weights/checkpoint.h"

namespace lw::weights {

// Whether random_blocks can make `type` (the quantised GGML types lightwave loads).
bool has_random_blocks(FileDType type);

// The bytes of a [rows, cols] matrix of `type` blocks (cols whole blocks), from `seed`.
// `scale` multiplies the weights' size (1: about 0.3).
std::vector<std::byte> random_blocks(FileDType type, int64_t rows, int64_t cols, uint64_t seed, float scale = 1.0f);

}  // namespace lw::weights
