#include "model/shard.h"

#include <algorithm>

#include "base/error.h"

namespace lw::model {

ModelConfig shard_config(const ModelConfig& c, int size) {
  LW_CHECK(size >= 1, "tensor parallelism over " << size << " ranks");
  ModelConfig s = c;
  if (size == 1) return s;
  auto divide = [&](int64_t v, const char* what) {
    LW_CHECK(v % size == 0, "tensor parallelism over " << size << " ranks: the model's " << what << " (" << v
                                                       << ") does not divide among them");
    return v / size;
  };
  s.heads = divide(c.heads, "attention heads");
  if (c.kv_heads % size == 0) {
    s.kv_heads = c.kv_heads / size;
  } else {
    LW_CHECK(size % c.kv_heads == 0, "tensor parallelism over " << size << " ranks: the model's " << c.kv_heads
                                                                << " KV heads neither divide among the ranks nor divide them");
    s.kv_heads = 1;  // each rank keeps the KV head its query heads read
  }
  const bool dense = std::find(c.moe_layer.begin(), c.moe_layer.end(), false) != c.moe_layer.end();
  if (dense) s.intermediate = divide(c.intermediate, "MLP width (intermediate_size)");
  if (c.experts > 0) s.moe_intermediate = divide(c.moe_intermediate, "expert width (moe_intermediate_size)");
  if (c.shared_intermediate > 0) s.shared_intermediate = divide(c.shared_intermediate, "shared expert width");
  s.vocab = (c.vocab + size - 1) / size;
  return s;
}

}  // namespace lw::model
