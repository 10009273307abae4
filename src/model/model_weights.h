// A model's tensors on the device, one struct per layer, and how they are read from an
// architecture's tensor-name table (a rank's shard sliced out as they are read).
#pragma once
#include <vector>

#include "core/tensor.h"
#include "model/arch/architecture.h"
#include "ops/weight.h"
#include "model/config.h"
#include "model/shard.h"
#include "model/weight_loader.h"

namespace lw::model {

// One MoE matrix of every expert ([experts, N, K]): a stacked tensor in the model dtype (the
// grouped GEMM), or, where the checkpoint's experts stay quantised on the device, one Weight per
// expert (ops::grouped_linear over ExpertWeights: one grouped launch for int4 experts, else each
// expert's rows by linear in its format).
struct ExpertMatrices {
  Tensor stacked;
  ops::ExpertWeights each;
};

// One layer's weights, in the layout the layers use (weights a block variant lacks stay
// undefined). The projections are ops::Weight, whose format selects the GEMM kernel; norms and
// biases are plain tensors.
struct LayerWeights {
  Tensor attn_norm, mlp_norm;
  ops::Weight qkv;  // q, k and v projections fused: [(heads + 2 kv_heads) * head_dim, hidden]
  Tensor qkv_bias;
  Tensor q_norm, k_norm;
  // The scales an FP8 KV cache stores this layer's keys and values with (f32 [local kv_heads]),
  // where the checkpoint gives them (self_attn.k_scale / v_scale, or k_proj / v_proj
  // .output_scale); undefined: 1.
  Tensor k_cache_scale, v_cache_scale;
  ops::Weight o;
  Tensor o_bias;
  ops::Weight gate_up, down;  // dense MLP: [2 * intermediate, hidden] (gate rows first), [hidden, intermediate]
  ops::Weight router;                      // MoE: [experts, hidden]
  ExpertMatrices experts_gate_up, experts_down;  // [experts, 2 * moe_intermediate, hidden], [experts, hidden, moe_intermediate]
  ops::Weight shared_gate_up, shared_down, shared_gate;  // Qwen2-MoE shared expert and its gate [1, hidden]
};

struct ModelWeights {
  Tensor embed, final_norm;
  ops::Weight lm_head;  // the embedding table itself with tied embeddings
  std::vector<LayerWeights> layers;
};

// Every tensor of the model (or of one rank's shard: `local` has its shapes), under the names
// of `arch` (GGUF names when config.gguf). With a dry loader only the byte count results.
ModelWeights load_weights(WeightLoader& loader, const Architecture& arch, const ModelConfig& config, const ModelConfig& local,
                          const Shard& shard);

}  // namespace lw::model
