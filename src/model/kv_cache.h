// The paged key/value cache of one model: per layer, K and V blocks of block_size tokens
// ([num_blocks, block_size, kv_heads, head_dim]). This first form serves one sequence whose
// blocks are taken in order; the serving engine hands blocks to many sequences.
#pragma once
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "model/config.h"

namespace lw::model {

class KvCache {
 public:
  KvCache(Context& ctx, const ModelConfig& config, DType dtype, int64_t capacity_tokens, int block_size = 16);
  int64_t capacity() const { return capacity_; }
  int block_size() const { return block_size_; }
  const Tensor& k(int64_t layer) const { return k_[static_cast<size_t>(layer)]; }
  const Tensor& v(int64_t layer) const { return v_[static_cast<size_t>(layer)]; }
  const Tensor& block_table() const { return block_table_; }  // i32 [1, num_blocks]: 0, 1, 2, ...

 private:
  int64_t capacity_;
  int block_size_;
  std::vector<Tensor> k_, v_;
  Tensor block_table_;
};

}  // namespace lw::model
