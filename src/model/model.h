// A decoder-only transformer (Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE):
// one block implementation parameterised by ModelConfig, weights on the device in the compute
// dtype, forward passes over the kernel and GEMM layers.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "ops/rope.h"
#include "weights/checkpoint.h"

namespace lw::model {

struct LayerWeights {
  Tensor attn_norm, mlp_norm;
  Tensor qkv, qkv_bias;  // q, k and v projections fused: [(heads + 2 kv_heads) * head_dim, hidden]
  Tensor q_norm, k_norm;
  Tensor o, o_bias;
  Tensor gate_up, down;  // dense MLP: [2 * intermediate, hidden] (gate rows first), [hidden, intermediate]
  Tensor router;                           // MoE: [experts, hidden]
  Tensor experts_gate_up, experts_down;    // [experts, 2 * moe_intermediate, hidden], [experts, hidden, moe_intermediate]
  Tensor shared_gate_up, shared_down, shared_gate;  // Qwen2-MoE shared expert and its gate [1, hidden]
};

// One sequence's share of a forward pass: its new tokens, the position of the first (the
// tokens before it are in the cache already), its block table (covering every position up to
// the last new token), and which logits it wants.
struct SequenceChunk {
  enum class Logits { none, last, all };
  std::span<const int32_t> tokens;
  int64_t start = 0;
  std::span<const int32_t> blocks;
  Logits logits = Logits::last;
};

class Model {
 public:
  // Checks every tensor's presence and shape and the device memory first, then loads the
  // weights converted to `dtype` (f32, f16 or bf16).
  static std::unique_ptr<Model> load(Context& ctx, const weights::Checkpoint& ckpt, const ModelConfig& config, DType dtype);
  // Random weights of the config's shape (benchmarks without a checkpoint): uniform, norm
  // weights near 1, matrices within +-1/sqrt(fan-in); the same for the same seed everywhere.
  static std::unique_ptr<Model> random(Context& ctx, const ModelConfig& config, DType dtype, uint64_t seed = 1);

  const ModelConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  // Bytes the weights take on the device.
  size_t weight_bytes() const { return weight_bytes_; }

  // Runs a batch of sequence chunks (prefill chunks and decode tokens alike), writing their
  // K/V into `cache`, and returns the logits the chunks asked for, in batch order, as
  // [rows, vocab] in the model's dtype.
  Tensor forward(Context& ctx, KvCache& cache, const std::vector<SequenceChunk>& batch);

 private:
  Model(Context& ctx, const ModelConfig& config, DType dtype);
  static std::unique_ptr<Model> build(Context& ctx, const weights::Checkpoint* ckpt, const ModelConfig& config, DType dtype,
                                      uint64_t seed);
  struct BatchLayout;
  void attention(Context& ctx, KvCache& cache, int64_t layer, const Tensor& x, const BatchLayout& b, const Tensor& out);
  void dense_mlp(Context& ctx, const Tensor& gate_up, const Tensor& down, const Tensor& x, const Tensor& out);
  void moe_mlp(Context& ctx, const LayerWeights& w, const Tensor& x, const Tensor& out);

  ModelConfig config_;
  DType dtype_;
  size_t weight_bytes_ = 0;
  Tensor embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  std::optional<ops::Rope> rope_;
};

}  // namespace lw::model
