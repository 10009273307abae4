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

namespace lw::parallel {
class Communicator;
}

namespace lw::model {

// The part of a model one rank of a tensor-parallel group holds: attention heads, MLP and
// expert widths and the vocabulary divided among `size` ranks (column-parallel QKV and
// gate/up, row-parallel o and down with an all-reduce after each, vocabulary-parallel
// embedding and LM head). With fewer KV heads than ranks each rank keeps the one KV head its
// query heads read.
struct Shard {
  int rank = 0, size = 1;
  parallel::Communicator* comm = nullptr;  // needed when size > 1
};

// The shapes one rank of a group of `size` holds (heads, kv_heads, intermediate,
// moe_intermediate, shared_intermediate divided; vocab the padded shard, ceil(vocab / size)).
// Throws naming the dimension that does not divide.
ModelConfig shard_config(const ModelConfig& config, int size);

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
  // weights converted to `dtype` (f32, f16 or bf16): the whole model, or the slices of one
  // rank's shard (each tensor is read whole, sliced and the rest freed, so no rank ever holds
  // the whole model).
  static std::unique_ptr<Model> load(Context& ctx, const weights::Checkpoint& ckpt, const ModelConfig& config, DType dtype,
                                     const Shard& shard = {});
  // Random weights of the config's shape (benchmarks without a checkpoint): uniform, norm
  // weights near 1, matrices within +-1/sqrt(fan-in); the same for the same seed everywhere,
  // and a shard holds the same values as the slice of the whole model.
  static std::unique_ptr<Model> random(Context& ctx, const ModelConfig& config, DType dtype, uint64_t seed = 1,
                                       const Shard& shard = {});

  // The whole model's configuration, and the shapes this rank holds (the same without
  // tensor parallelism); the KV cache of this rank takes the shard's shapes.
  ~Model();

  const ModelConfig& config() const { return config_; }
  const ModelConfig& shard_config() const { return local_; }
  const Shard& shard() const { return shard_; }
  DType dtype() const { return dtype_; }
  // Bytes the weights take on the device.
  size_t weight_bytes() const { return weight_bytes_; }

  // Decode steps (one new token per sequence) replayed from CUDA / HIP graphs, where the
  // target has them: off unless LW_CUDA_GRAPHS=1 (see DecodeGraphs in model.cpp).
  void set_decode_graphs(bool on);

  // Runs a batch of sequence chunks (prefill chunks and decode tokens alike), writing their
  // K/V into `cache`, and returns the logits the chunks asked for, in batch order, as
  // [rows, vocab] in the model's dtype. Every rank of a group runs the same batch; each gets
  // the whole logits.
  Tensor forward(Context& ctx, KvCache& cache, const std::vector<SequenceChunk>& batch);

 private:
  Model(Context& ctx, const ModelConfig& config, DType dtype, const Shard& shard);
  static std::unique_ptr<Model> build(Context& ctx, const weights::Checkpoint* ckpt, const ModelConfig& config, DType dtype,
                                      uint64_t seed, const Shard& shard);
  // The sum of every rank's partial result (row-parallel projections, the embedding shards).
  void reduce(Context& ctx, const Tensor& x);
  struct BatchLayout;
  class DecodeGraphs;
  // The layers over a batch laid out on the device.
  Tensor compute(Context& ctx, KvCache& cache, const BatchLayout& b);
  void attention(Context& ctx, KvCache& cache, int64_t layer, const Tensor& x, const BatchLayout& b, const Tensor& out);
  void dense_mlp(Context& ctx, const Tensor& gate_up, const Tensor& down, const Tensor& x, const Tensor& out);
  void moe_mlp(Context& ctx, const LayerWeights& w, const Tensor& x, const Tensor& out);

  ModelConfig config_, local_;
  Shard shard_;
  DType dtype_;
  size_t weight_bytes_ = 0;
  Tensor embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  std::optional<ops::Rope> rope_;
  std::unique_ptr<DecodeGraphs> graphs_;
  bool decode_graphs_ = false;
};

}  // namespace lw::model
