#include "model/kv_cache.h"

namespace lw::model {

KvCache::KvCache(Context& ctx, const ModelConfig& config, DType dtype, int64_t num_blocks, int block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  LW_CHECK(num_blocks > 0 && block_size > 0,
           "KvCache: " << num_blocks << " blocks of " << block_size << " tokens; both must be positive");
  for (int64_t l = 0; l < config.layers; ++l) {
    k_.push_back(ctx.empty({num_blocks, block_size, config.kv_heads, config.head_dim}, dtype));
    v_.push_back(ctx.empty({num_blocks, block_size, config.kv_heads, config.head_dim}, dtype));
  }
}

size_t KvCache::block_bytes(const ModelConfig& config, DType dtype, int block_size) {
  return 2 * static_cast<size_t>(config.layers) * static_cast<size_t>(block_size) * static_cast<size_t>(config.kv_heads) *
         static_cast<size_t>(config.head_dim) * dtype_size(dtype);
}

}  // namespace lw::model
