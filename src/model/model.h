// A decoder-only transformer of any registered architecture (model/arch/registry.h): its
// weights on the device in the compute dtype (the whole model or one rank's shard), and the
// forward pass, block by block as the architecture's BlockVariant says (model/layers.h).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "model/arch/architecture.h"
#include "model/batch_layout.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/model_weights.h"
#include "model/shard.h"
#include "ops/rope.h"
#include "weights/checkpoint.h"

namespace lw::model {

class DecodeGraphs;

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
  // projections: the GGML type of the random projection matrices (weights/random_blocks.h), or
  // llama.cpp's Q4_K_M mix (RandomProjections, model/weight_loader.h); f32 makes them dense in
  // `dtype`.
  static std::unique_ptr<Model> random(Context& ctx, const ModelConfig& config, DType dtype, uint64_t seed = 1,
                                       const Shard& shard = {}, RandomProjections projections = {});

  ~Model();

  // The whole model's configuration, and the shapes this rank holds (the same without
  // tensor parallelism); the KV cache of this rank takes the shard's shapes.
  const ModelConfig& config() const { return config_; }
  const ModelConfig& shard_config() const { return local_; }
  const Shard& shard() const { return shard_; }
  DType dtype() const { return dtype_; }
  // Bytes the weights take on the device, and the weights themselves (their formats).
  size_t weight_bytes() const { return weight_bytes_; }
  const ModelWeights& weights() const { return weights_; }
  // Of weight_bytes, the routed experts' matrices (0 without experts): a token reads
  // experts_per_token / experts of them.
  size_t routed_expert_bytes() const { return routed_expert_bytes_; }
  // Per layer, the scales the checkpoint gives an FP8 KV cache (model::KvCache), undefined
  // where it gives none.
  std::vector<KvHeadScales> kv_head_scales() const;
  // The largest temporary a forward pass takes for its weights: a linear over a GGUF or FP8
  // projection may expand it to the compute dtype ([N, K], ops/weight.h); the KV cache leaves
  // this much free (engine::kv_blocks_that_fit). 0 for dense and int8 weights.
  size_t expansion_bytes() const { return expansion_bytes_; }

  // Decode steps (one new token per sequence) replayed from CUDA / HIP graphs, where the
  // target has them: on unless LW_CUDA_GRAPHS=0 (see model/decode_graphs.h).
  void set_decode_graphs(bool on);
  bool decode_graphs() const { return decode_graphs_ && Graph::graphs_supported(); }
  // Device memory the decode graphs may hold (the KV cache leaves it free; 0 without graphs).
  size_t graph_bytes() const;
  // Decode graphs captured so far (0 without graphs).
  size_t captured_decode_graphs() const;

  // Runs a batch of sequence chunks (prefill chunks and decode tokens alike), writing their
  // K/V into `cache`, and returns the logits the chunks asked for, in batch order, as
  // [rows, vocab] in the model's dtype. Every rank of a group runs the same batch; each gets
  // the whole logits.
  Tensor forward(Context& ctx, KvCache& cache, const std::vector<SequenceChunk>& batch);

 private:
  Model(Context& ctx, const ModelConfig& config, DType dtype, const Shard& shard);
  static std::unique_ptr<Model> build(Context& ctx, const weights::Checkpoint* ckpt, const ModelConfig& config,
                                      DType dtype, uint64_t seed, const Shard& shard, RandomProjections projections);
  // The layers over a batch laid out on the device.
  Tensor compute(Context& ctx, KvCache& cache, const BatchLayout& b);
  // The wanted rows' logits ([rows, vocab]) from the final normed hidden states.
  Tensor logits(Context& ctx, const Tensor& normed, const BatchLayout& b);

  ModelConfig config_, local_;
  Shard shard_;
  DType dtype_;
  size_t weight_bytes_ = 0, expansion_bytes_ = 0, routed_expert_bytes_ = 0;
  ModelWeights weights_;
  std::vector<BlockVariant> blocks_;  // per layer
  std::optional<ops::Rope> rope_;
  std::unique_ptr<DecodeGraphs> graphs_;
  bool decode_graphs_ = false;
};

}  // namespace lw::model
