// Mixtral: Mistral's attention with a mixture of experts in every layer (top-k of
// num_local_experts, weights renormalised), experts as wide as intermediate_size.
#include "model/arch/architecture.h"
#include "model/config.h"
#include "model/config_keys.h"

namespace lw::model::arch {

// extern: registry.cpp lists the definitions (const alone would make them file-local).

namespace {

void read_mixtral(const ConfigKeys& c, ModelConfig& m) {
  m.qkv_bias = m.o_bias = c.get<bool>("attention_bias", false);
  m.experts = c.get<int>("num_local_experts");
  m.experts_per_token = c.get<int>("num_experts_per_tok");
  m.moe_intermediate = m.intermediate;
  m.norm_topk_prob = true;
  m.moe_layer.assign(static_cast<size_t>(m.layers), true);
  m.sliding_window = c.get<int64_t>("sliding_window", 0);
  LW_CHECK(m.sliding_window >= 0, "model config: sliding_window must be positive or null, got " << m.sliding_window);
}

// GGUF: llama.cpp writes Mixtral as a "llama" file with experts (config.cpp takes this family
// for it), q and k rows permuted as Llama's.
void read_mixtral_gguf(const weights::GgufFile&, const std::string&, ModelConfig& m) {
  m.rope.neox = false;
  m.norm_topk_prob = true;
}

TensorNames mixtral_names() {
  TensorNames n;
  // Mixtral's own checkpoints: block_sparse_moe.experts.<e>.w1/w3/w2; transformers 5 writes
  // mlp.experts stacked.
  n.moe = {{"block_sparse_moe.", "w1.weight", "w3.weight", "w2.weight"},
           {"mlp.", "gate_proj.weight", "up_proj.weight", "down_proj.weight"}};
  return n;
}

}  // namespace

extern const Architecture mixtral{
    .name = "mixtral",
    .hf_model_types = {"mixtral"},
    .read_hf = read_mixtral,
    .read_gguf = read_mixtral_gguf,
    .names = mixtral_names(),
};

}  // namespace lw::model::arch
