// The paged key/value cache of one model: per layer, K and V blocks of block_size tokens
// ([num_blocks, block_size, kv_heads, head_dim]). A sequence owns a list of blocks (its block
// table); token t of the sequence lives in block table[t / block_size] at offset
// t % block_size. Which blocks a sequence gets is decided above (engine::BlockManager, or a
// single sequence taking blocks in order). The cache stores the model's dtype or 8-bit codes
// with scales (ops::KvCacheFormat: e4m3 with a scale per key/value head, the checkpoint's or 1;
// int8 with a scale per slot and head).
#pragma once
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "model/config.h"
#include "ops/attention.h"

namespace lw::model {

// One layer's scales of an FP8 cache (f32 [kv_heads] each); undefined: 1.
struct KvHeadScales {
  Tensor k, v;
};

class KvCache {
 public:
  // dtype: the model's (the activations K and V arrive in). head_scales: per layer, the scales
  // of an FP8 cache where the checkpoint gives them (Model::kv_head_scales; empty: all 1).
  KvCache(Context& ctx, const ModelConfig& config, DType dtype, int64_t num_blocks, int block_size = 16,
          ops::KvCacheFormat format = ops::KvCacheFormat::model, const std::vector<KvHeadScales>& head_scales = {});
  // Blocks for `tokens` tokens of one sequence.
  static int64_t blocks_for(int64_t tokens, int block_size) { return (tokens + block_size - 1) / block_size; }
  // Bytes one block takes over all layers (K and V, with int8's per-slot scales).
  static size_t block_bytes(const ModelConfig& config, DType dtype, int block_size,
                            ops::KvCacheFormat format = ops::KvCacheFormat::model);

  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  ops::KvCacheFormat format() const { return format_; }
  const Tensor& k(int64_t layer) const { return layers_[static_cast<size_t>(layer)].k; }
  const Tensor& v(int64_t layer) const { return layers_[static_cast<size_t>(layer)].v; }
  // The layer's caches with their format and scales, as the attention ops take them.
  const ops::PagedKv& layer(int64_t layer) const { return layers_[static_cast<size_t>(layer)]; }

 private:
  int64_t num_blocks_;
  int block_size_;
  ops::KvCacheFormat format_;
  std::vector<ops::PagedKv> layers_;
};

}  // namespace lw::model
