// Rotary position embedding (RoPE) for Llama/Qwen/Mistral-style attention, applied in place.
#pragma once
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"

namespace lw::ops {

enum class RopeScaling { none, linear, llama3, yarn };

struct RopeConfig {
  int rotary_dim = 0;      // even; the first rotary_dim dims of each head rotate (partial rotary)
  double theta = 10000.0;  // rope_theta
  bool neox = true;        // half-split pairs (Llama, Qwen); false: interleaved pairs (GPT-J)
  RopeScaling scaling = RopeScaling::none;
  double factor = 1.0;     // linear, llama3, yarn
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position = 8192;                  // llama3, yarn
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double attention_factor = 0.0;                         // yarn; 0: 0.1 * ln(factor) + 1
};

// Per-head RMSNorm weights applied before the rotation (Qwen3's q_norm and k_norm): [head_dim]
// each, of q's dtype.
struct HeadNorm {
  Tensor q_weight, k_weight;
  float eps = 1e-6f;
};

// Where apply() also writes the rotated k and the rows of v into a layer's KV cache in the same
// launch (instead of rotating k in place, and kv_write after): the cache in q's dtype (an 8-bit
// cache takes apply() and kv_write), [num_blocks, block_size, k_heads, head_dim], contiguous;
// v: k's shape, contiguous heads, any token stride; slot_mapping: i64 [tokens], -1 skips a
// token. The slots are the caller's to check (as kv_write(..., check = false)): a slot outside
// the cache is not written.
struct RopeCacheRows {
  Tensor v;
  Tensor slot_mapping;
  Tensor k_cache, v_cache;
};

// The frequency table of a configuration, on the device; apply() rotates q and k.
class Rope {
 public:
  Rope(Context& ctx, const RopeConfig& config);

  // q: [tokens, q_heads, head_dim], k: [tokens, k_heads, head_dim] (or undefined), each with
  // contiguous heads and any token stride (views into a fused QKV output work); same float
  // dtype; positions: i32 or i64 [tokens]; all on the device. head_dim >= rotary_dim.
  // k rotates in place; q in place, or into q_out where given (q's shape and dtype, contiguous
  // heads, memory apart from q and k): a view of a fused QKV output becomes a tensor of its
  // own without a copy first. With `norm`, each head is RMS-normalised with its weights first
  // (rms_norm's result per head, then the rotation of it), every dim, in the same launch.
  // With `cache`, k's rows go to the cache and k itself is left as it was.
  void apply(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& positions,
             const Tensor& q_out = Tensor(), const HeadNorm* norm = nullptr, const RopeCacheRows* cache = nullptr) const;

  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float mscale() const { return mscale_; }
  const RopeConfig& config() const { return config_; }

 private:
  RopeConfig config_;
  std::vector<float> inv_freq_;
  float mscale_ = 1.0f;
  Tensor table_;
};

}  // namespace lw::ops
