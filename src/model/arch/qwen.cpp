// Qwen2 (biases on q, k and v), Qwen3 (RMSNorm of each q and k head before RoPE; q/k/v bias
// only with attention_bias) and their mixtures of experts: Qwen2-MoE with a shared expert
// behind a sigmoid gate, Qwen3-MoE without; decoder_sparse_step and mlp_only_layers choose
// the MoE layers, the rest keep a dense MLP.
#include "model/arch/architecture.h"
#include "model/config.h"
#include "model/config_keys.h"
#include "weights/gguf.h"

namespace lw::model::arch {

// extern: registry.cpp lists the definitions (const alone would make them file-local).

namespace {

void read_qwen2(const ConfigKeys&, ModelConfig& m) { m.qkv_bias = true; }

void read_qwen3(const ConfigKeys& c, ModelConfig& m) {
  m.qk_norm = true;
  m.qkv_bias = c.get<bool>("attention_bias", false);
}

void read_experts(const ConfigKeys& c, ModelConfig& m) {
  m.experts = c.has("num_experts") ? c.get<int>("num_experts") : c.get<int>("num_local_experts");
  m.experts_per_token = c.get<int>("num_experts_per_tok");
  m.moe_intermediate = c.get<int64_t>("moe_intermediate_size");
  m.norm_topk_prob = c.get<bool>("norm_topk_prob", false);
  const int step = c.get<int>("decoder_sparse_step", 1);
  const std::vector<int64_t> dense_only = c.get<std::vector<int64_t>>("mlp_only_layers", {});
  m.moe_layer.assign(static_cast<size_t>(m.layers), false);
  for (int64_t l = 0; l < m.layers; ++l) {
    bool dense = step <= 0 || (l + 1) % step != 0;
    for (int64_t d : dense_only) dense |= d == l;
    m.moe_layer[static_cast<size_t>(l)] = !dense;
  }
}

void read_qwen2_moe(const ConfigKeys& c, ModelConfig& m) {
  read_qwen2(c, m);
  read_experts(c, m);
  m.shared_intermediate = c.get<int64_t>("shared_expert_intermediate_size", 0);
}

void read_qwen3_moe(const ConfigKeys& c, ModelConfig& m) {
  read_qwen3(c, m);
  read_experts(c, m);
}

// GGUF (llama.cpp's qwen2moe and qwen3moe): every layer a mixture of experts (config.cpp reads
// the counts and widths); Qwen2-MoE's top-k weights are not renormalised, Qwen3-MoE's are.
void read_qwen2_moe_gguf(const weights::GgufFile& g, const std::string& arch, ModelConfig& m) {
  m.norm_topk_prob = false;
  const std::string shared = arch + ".expert_shared_feed_forward_length";
  m.shared_intermediate = g.has(shared) ? g.get_i64(shared) : m.intermediate;
}

void read_qwen3_moe_gguf(const weights::GgufFile&, const std::string&, ModelConfig& m) { m.norm_topk_prob = true; }

void qwen2_defaults(ModelConfig& m) { m.qkv_bias = true; }
void qwen3_defaults(ModelConfig& m) { m.qk_norm = true; }

TensorNames qwen_moe_names() {
  TensorNames n;
  n.moe = {{"mlp.", "gate_proj.weight", "up_proj.weight", "down_proj.weight"}};
  return n;
}

}  // namespace

extern const Architecture qwen2{
    .name = "qwen2",
    .hf_model_types = {"qwen2"},
    .gguf_architectures = {"qwen2"},
    .read_hf = read_qwen2,
    .named_defaults = qwen2_defaults,
    .names = {},
};

extern const Architecture qwen3{
    .name = "qwen3",
    .hf_model_types = {"qwen3"},
    .gguf_architectures = {"qwen3"},
    .read_hf = read_qwen3,
    .named_defaults = qwen3_defaults,
    .names = {},
};

extern const Architecture qwen2_moe{
    .name = "qwen2_moe",
    .hf_model_types = {"qwen2_moe"},
    .gguf_architectures = {"qwen2moe"},
    .read_hf = read_qwen2_moe,
    .read_gguf = read_qwen2_moe_gguf,
    .named_defaults = qwen2_defaults,
    .names = qwen_moe_names(),
};

extern const Architecture qwen3_moe{
    .name = "qwen3_moe",
    .hf_model_types = {"qwen3_moe"},
    .gguf_architectures = {"qwen3moe"},
    .read_hf = read_qwen3_moe,
    .read_gguf = read_qwen3_moe_gguf,
    .named_defaults = qwen3_defaults,
    .names = qwen_moe_names(),
};

}  // namespace lw::model::arch
