#include "weights/random_blocks.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "base/error.h"
#include "gpu/compat.h"
#include "gpu/numeric.h"

namespace lw::weights {

namespace {

// Where each block format keeps its fp16 scales (ggml-common.h), and the value there that gives
// weights of size ~0.3 from the format's quantised values; a negative one is a Q4_1/Q5_1 minimum.
struct BlockScales {
  FileDType type;
  std::vector<std::pair<int, float>> fields;  // byte offset, value
};
const BlockScales kBlockScales[] = {
    {FileDType::q4_0, {{0, 0.04f}}},
    {FileDType::q4_1, {{0, 0.04f}, {2, -0.3f}}},
    {FileDType::q5_0, {{0, 0.02f}}},
    {FileDType::q5_1, {{0, 0.02f}, {2, -0.3f}}},
    {FileDType::q8_0, {{0, 0.0025f}}},
    {FileDType::q2_k, {{80, 0.006f}, {82, 0.01f}}},
    {FileDType::q3_k, {{108, 0.0025f}}},
    {FileDType::q4_k, {{0, 0.0006f}, {2, 0.005f}}},
    {FileDType::q5_k, {{0, 0.0003f}, {2, 0.005f}}},
    {FileDType::q6_k, {{208, 0.00007f}}},
};

const BlockScales* scales_of(FileDType type) {
  for (const BlockScales& b : kBlockScales)
    if (b.type == type) return &b;
  return nullptr;
}

// SplitMix64: eight random bytes per step, fast enough for a model's worth of blocks.
uint64_t next(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

bool has_random_blocks(FileDType type) { return scales_of(type) != nullptr; }

bool has_random_scaled(FileDType type) { return type == FileDType::f8_e4m3 || type == FileDType::i8; }

RandomScaled random_scaled(FileDType type, int64_t rows, int64_t cols, uint64_t seed, int64_t block) {
  LW_CHECK(has_random_scaled(type), "random_scaled: " << file_dtype_name(type) << " is not f8_e4m3 or i8");
  LW_CHECK(rows >= 0 && cols > 0 && block > 0, "random_scaled: [" << rows << ", " << cols << "], blocks of " << block);
  const bool fp8 = type == FileDType::f8_e4m3;
  RandomScaled r;
  r.values.resize(static_cast<size_t>(rows * cols));
  uint64_t state = seed;
  // One random byte per value, eight per step, transformed eight at a time (a model's worth is
  // tens of GB): fp8 keeps each byte's sign and mantissa bits and takes exponent 1..8 (never
  // NaN); int8 turns -128 (0x80) into -127.
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  auto values = [fp8](uint64_t x) {
    if (fp8) return (x & (0x87 * kOnes)) | ((((x >> 3) & (7 * kOnes)) + kOnes) << 3);
    const uint64_t y = x ^ (0x80 * kOnes);                                    // zero where x is 0x80
    const uint64_t zero = ~(((y & (0x7f * kOnes)) + 0x7f * kOnes) | y) & (0x80 * kOnes);
    return x | (zero >> 7);
  };
  std::byte* out = r.values.data();
  const size_t count = r.values.size();
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const uint64_t w = values(next(state));
    std::memcpy(out + i, &w, 8);
  }
  for (const uint64_t w = values(next(state)); i < count; ++i) out[i] = static_cast<std::byte>(w >> (8 * (i % 8)));
  r.scale_shape = fp8 ? std::vector<int64_t>{(rows + block - 1) / block, (cols + block - 1) / block}
                      : std::vector<int64_t>{rows, 1};
  const float nominal = 0.3f / std::sqrt(static_cast<float>(cols)) / (fp8 ? 1.0f : 127.0f);
  r.scales.resize(static_cast<size_t>(r.scale_shape[0] * r.scale_shape[1]));
  for (float& s : r.scales) s = nominal * (0.5f + 0.5f * static_cast<float>(next(state) >> 40) / static_cast<float>(1 << 24));
  return r;
}

std::vector<std::byte> random_blocks(FileDType type, int64_t rows, int64_t cols, uint64_t seed, float scale) {
  const BlockScales* f = scales_of(type);
  LW_CHECK(f != nullptr, "random_blocks: " << file_dtype_name(type) << " is not a quantised GGML type");
  const int64_t elems = file_dtype_block_elems(type), block_bytes = file_dtype_block_bytes(type);
  LW_CHECK(rows >= 0 && cols >= 0 && cols % elems == 0,
           "random_blocks: [" << rows << ", " << cols << "] " << file_dtype_name(type) << ": columns must be whole blocks of "
                              << elems);
  const int64_t blocks = rows * (cols / elems);
  std::vector<std::byte> bytes(static_cast<size_t>(blocks * block_bytes));
  uint64_t state = seed;
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    const uint64_t r = next(state);
    std::memcpy(bytes.data() + i, &r, 8);
  }
  for (const uint64_t r = next(state); i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(r >> (8 * (i % 8)));
  for (int64_t b = 0; b < blocks; ++b)
    for (const auto& [offset, size] : f->fields) {
      // 0.5 to 1 times the nominal size, from the block's own random bits.
      const float spread = 0.5f + 0.5f * static_cast<float>(next(state) >> 40) / static_cast<float>(1 << 24);
      const half h = gpu::from_float<half>(size * scale * spread);
      std::memcpy(bytes.data() + b * block_bytes + offset, &h, sizeof(h));
    }
  return bytes;
}

}  // namespace lw::weights
