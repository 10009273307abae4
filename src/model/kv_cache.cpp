#include "model/kv_cache.h"

namespace lw::model {

KvCache::KvCache(Context& ctx, const ModelConfig& config, DType dtype, int64_t capacity_tokens, int block_size)
    : capacity_(capacity_tokens), block_size_(block_size) {
  LW_CHECK(capacity_tokens > 0 && block_size > 0, "KvCache: capacity " << capacity_tokens << " and block size " << block_size
                                                                       << " must be positive");
  const int64_t blocks = (capacity_tokens + block_size - 1) / block_size;
  for (int64_t l = 0; l < config.layers; ++l) {
    k_.push_back(ctx.empty({blocks, block_size, config.kv_heads, config.head_dim}, dtype));
    v_.push_back(ctx.empty({blocks, block_size, config.kv_heads, config.head_dim}, dtype));
  }
  Tensor table = Tensor::empty_host({1, blocks}, DType::i32);
  for (int64_t b = 0; b < blocks; ++b) table.data<int32_t>()[b] = static_cast<int32_t>(b);
  block_table_ = ctx.to_device(table);
}

}  // namespace lw::model
