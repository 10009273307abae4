#include "model/arch/architecture.h"

#include "model/config.h"

namespace lw::model {

BlockVariant block_variant(const ModelConfig& c, int64_t layer) {
  BlockVariant b;
  b.qkv_bias = c.qkv_bias;
  b.o_bias = c.o_bias;
  b.qk_norm = c.qk_norm;
  if (c.moe_layer[static_cast<size_t>(layer)])
    b.mlp = c.shared_intermediate > 0 ? MlpVariant::moe_shared_expert : MlpVariant::moe;
  return b;
}

}  // namespace lw::model
