// An architecture: what one model family is, as data. Its names (the Hugging Face model_type
// values and GGUF general.architecture values it reads), the config keys only it has, the
// names of its tensors in both formats, and the variant of the shared transformer block it
// uses. The loader and the forward pass read these; they hold no per-family code.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lw::weights {
class GgufFile;
}

namespace lw::model {

struct ModelConfig;
class ConfigKeys;

// One tensor's names: under "model.layers.<l>." (or, for the model-wide tensors, the whole
// name) in a Hugging Face checkpoint and under "blk.<l>." in a GGUF file; empty where the
// format has no such tensor.
struct TensorName {
  std::string hf, gguf;
};

// One naming of a mixture-of-experts MLP in Hugging Face checkpoints: the prefix of the
// router and the experts ("mlp.", Mixtral's "block_sparse_moe."), and the names of each
// expert's matrices (under "<prefix>experts.<e>.") when they are stored one per expert;
// transformers 5 stacks the experts as "<prefix>experts.gate_up_proj" / "experts.down_proj".
struct MoeNaming {
  std::string prefix;
  std::string expert_gate, expert_up, expert_down;
  std::string stacked_gate_up = "experts.gate_up_proj", stacked_down = "experts.down_proj";
};

// The names of every tensor of one architecture.
struct TensorNames {
  TensorName embed{"model.embed_tokens.weight", "token_embd.weight"};
  TensorName final_norm{"model.norm.weight", "output_norm.weight"};
  TensorName lm_head{"lm_head.weight", "output.weight"};

  TensorName attn_norm{"input_layernorm.weight", "attn_norm.weight"};
  TensorName mlp_norm{"post_attention_layernorm.weight", "ffn_norm.weight"};
  TensorName q{"self_attn.q_proj.weight", "attn_q.weight"};
  TensorName k{"self_attn.k_proj.weight", "attn_k.weight"};
  TensorName v{"self_attn.v_proj.weight", "attn_v.weight"};
  TensorName q_bias{"self_attn.q_proj.bias", "attn_q.bias"};
  TensorName k_bias{"self_attn.k_proj.bias", "attn_k.bias"};
  TensorName v_bias{"self_attn.v_proj.bias", "attn_v.bias"};
  TensorName q_norm{"self_attn.q_norm.weight", "attn_q_norm.weight"};
  TensorName k_norm{"self_attn.k_norm.weight", "attn_k_norm.weight"};
  TensorName o{"self_attn.o_proj.weight", "attn_output.weight"};
  TensorName o_bias{"self_attn.o_proj.bias", "attn_output.bias"};

  // Dense gated MLP.
  TensorName gate{"mlp.gate_proj.weight", "ffn_gate.weight"};
  TensorName up{"mlp.up_proj.weight", "ffn_up.weight"};
  TensorName down{"mlp.down_proj.weight", "ffn_down.weight"};

  // Mixture of experts in Hugging Face checkpoints: the namings tried in order, the first whose
  // router ("<prefix>gate.weight") is in the checkpoint taken, else the last; random weights
  // take the last one, stacked.
  std::vector<MoeNaming> moe;
  // Mixture of experts in GGUF files (llama.cpp's names, the same for every family): the router
  // [experts, hidden], each matrix of every expert stacked [experts, N, K], and Qwen2-MoE's
  // shared expert with its gate (a vector [hidden]).
  std::string gguf_router{"ffn_gate_inp.weight"}, gguf_experts_gate{"ffn_gate_exps.weight"},
      gguf_experts_up{"ffn_up_exps.weight"}, gguf_experts_down{"ffn_down_exps.weight"};
  std::string gguf_shared_gate{"ffn_gate_shexp.weight"}, gguf_shared_up{"ffn_up_shexp.weight"},
      gguf_shared_down{"ffn_down_shexp.weight"}, gguf_shared_expert_gate{"ffn_gate_inp_shexp.weight"};
  // The shared expert and its sigmoid gate (Qwen2-MoE).
  std::string shared_gate{"mlp.shared_expert.gate_proj.weight"}, shared_up{"mlp.shared_expert.up_proj.weight"},
      shared_down{"mlp.shared_expert.down_proj.weight"}, shared_expert_gate{"mlp.shared_expert_gate.weight"};
};

// The block every architecture shares: pre-norm (RMSNorm before attention and before the
// MLP, residual adds after), attention with optional q/k/v bias, o bias and per-head q/k
// RMSNorm, then a dense gated MLP, a mixture of experts, or experts plus a gated shared
// expert. ModelConfig carries the variant (qkv_bias, o_bias, qk_norm, moe_layer,
// shared_intermediate); an architecture's readers set it.
enum class MlpVariant { dense, moe, moe_shared_expert };
struct BlockVariant {
  bool qkv_bias = false, o_bias = false, qk_norm = false;
  MlpVariant mlp = MlpVariant::dense;
};
// Layer `layer`'s block as `config` describes it.
BlockVariant block_variant(const ModelConfig& config, int64_t layer);

struct Architecture {
  // The name the model is reported under (ModelConfig::architecture, summary()).
  std::string name;
  // config.json model_type values and GGUF general.architecture values it reads (GGUF: none
  // when the family has no GGUF support, or, as Mixtral, is read under another's name).
  std::vector<std::string> hf_model_types, gguf_architectures;
  // The config.json keys only this family has, read after the shared ones: the block
  // variant (biases, q/k norm), experts, sliding window.
  void (*read_hf)(const ConfigKeys& keys, ModelConfig& config) = nullptr;
  // The same for GGUF metadata, after the shared keys (keys are "<arch>.<name>"); may be null.
  void (*read_gguf)(const weights::GgufFile& gguf, const std::string& arch, ModelConfig& config) = nullptr;
  // The fixed block variant of a named benchmark shape (what read_hf sets for a config that
  // names only the shapes).
  void (*named_defaults)(ModelConfig& config) = nullptr;
  TensorNames names;
};

}  // namespace lw::model
