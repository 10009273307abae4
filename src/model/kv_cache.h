// The paged key/value cache of one model: per layer, K and V blocks of block_size tokens
// ([num_blocks, block_size, kv_heads, head_dim]). A sequence owns a list of blocks (its block
// table); token t of the sequence lives in block table[t / block_size] at offset
// t % block_size. Which blocks a sequence gets is decided above (engine::BlockManager, or a
// single sequence taking blocks in order).
#pragma once
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "model/config.h"

namespace lw::model {

class KvCache {
 public:
  KvCache(Context& ctx, const ModelConfig& config, DType dtype, int64_t num_blocks, int block_size = 16);
  // Blocks for `tokens` tokens of one sequence.
  static int64_t blocks_for(int64_t tokens, int block_size) { return (tokens + block_size - 1) / block_size; }
  // Bytes one block takes over all layers (K and V).
  static size_t block_bytes(const ModelConfig& config, DType dtype, int block_size);

  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  const Tensor& k(int64_t layer) const { return k_[static_cast<size_t>(layer)]; }
  const Tensor& v(int64_t layer) const { return v_[static_cast<size_t>(layer)]; }

 private:
  int64_t num_blocks_;
  int block_size_;
  std::vector<Tensor> k_, v_;
};

}  // namespace lw::model
