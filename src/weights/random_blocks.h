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

// A random [rows, cols] matrix of 8-bit values with scales, as a checkpoint stores it:
// f8_e4m3 with one f32 scale per block of `block` x `block` (the DeepSeek-V3 / Qwen3-FP8 layout:
// finite codes of magnitude 2^-6 to 3.75), or i8 with one scale per row (-127 to 127); weights of
// size ~0.3 / sqrt(cols) like the dense random weights.
struct RandomScaled {
  std::vector<std::byte> values;
  std::vector<float> scales;
  std::vector<int64_t> scale_shape;
};
bool has_random_scaled(FileDType type);
RandomScaled random_scaled(FileDType type, int64_t rows, int64_t cols, uint64_t seed, int64_t block = 128);

}  // namespace lw::weights
