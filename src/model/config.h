// The shape of a model, read from a Hugging Face config.json or from GGUF metadata: one
// description for every supported family (Llama, Mistral, Qwen2, Qwen3 and their MoE forms;
// model/arch/ defines each, model/arch/registry.cpp lists them).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/rope.h"

namespace lw::weights {
class GgufFile;
}

namespace lw::model {

// A Hugging Face checkpoint's quantization_config, for projections stored as 4-bit values (GPTQ,
// AWQ, compressed-tensors pack-quantized) or as 8-bit values with
// scales: quant_method "fp8" (F8_E4M3 weights; weight_scale_inv per 128 x 128 block in
// DeepSeek-V3 / Qwen3-FP8 checkpoints, or one weight_scale) and "compressed-tensors" with 8-bit
// weights (float-quantized: F8_E4M3; int-quantized / naive-quantized: I8; weight_scale per
// tensor, per output channel or per block). The loader reads each projection by its stored
// type; this says how block scales are laid out and that the scheme is one it knows.
struct WeightQuantization {
  std::string method;                   // "" when the checkpoint has no quantization_config
  int64_t block_rows = 0, block_cols = 0;  // block-wise weight scales; 0: none
  // Whether int8 weights go with int8 activations (W8A8: compressed-tensors input_activations);
  // false for weight-only int8 (W8A16), whose weights the loader expands.
  bool int8_activations = true;
  // Weights with group scales: quant_method "gptq" (4 or 8 bits: qweight, qzeros, scales,
  // g_idx), "awq" (4 bits, GEMM packing) or compressed-tensors "pack-quantized" (4 bits:
  // weight_packed, weight_scale): input columns per scale, -1 for one group per output row; 0
  // when the checkpoint has no such weights.
  int64_t group_size = 0;
  int gptq_bits = 4;  // bits per GPTQ value: 4 or 8
  // pack-quantized with zero points ("symmetric": false): weight_zero_point i32 [ceil(N/8), G].
  bool int4_asymmetric = false;
  bool gptq_v2 = false;  // GPTQ's qzeros hold the zero points (checkpoint_format gptq_v2), not zero - 1
};

struct ModelConfig {
  // The architecture's name in the registry (model/arch/registry.h): "llama", "qwen3_moe", ...
  // It picks the tensor names; the fields below describe the block.
  std::string architecture = "llama";
  int64_t vocab = 0, hidden = 0, layers = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t intermediate = 0;  // dense MLP width
  double rms_eps = 1e-6;
  ops::RopeConfig rope;
  int64_t max_position = 0;
  bool tie_embeddings = false;
  bool qkv_bias = false;  // bias on q, k and v (Qwen2; Llama's attention_bias)
  bool o_bias = false;    // bias on o_proj (Llama's attention_bias)
  bool qk_norm = false;   // RMSNorm of each q and k head before RoPE (Qwen3)
  // > 0: a token attends to the last sliding_window positions, itself included, in every layer
  // (Mistral, Mixtral); the context may be longer.
  int64_t sliding_window = 0;

  // Mixture of experts (experts == 0: every layer dense).
  int experts = 0, experts_per_token = 0;
  int64_t moe_intermediate = 0;
  int64_t shared_intermediate = 0;  // Qwen2-MoE's shared expert, with its sigmoid gate
  bool norm_topk_prob = true;       // renormalise the chosen experts' weights
  std::vector<bool> moe_layer;      // per layer: MoE or dense MLP

  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;
  DType checkpoint_dtype = DType::bf16;  // torch_dtype / dtype of the checkpoint
  bool gguf = false;                     // weights named and laid out as llama.cpp writes them
  WeightQuantization quantization;

  // config.json of a Hugging Face model directory. Unsupported model types or features are
  // lw::Errors naming the file and the key.
  static ModelConfig from_hf(const std::string& config_json_path);
  static ModelConfig from_gguf(const weights::GgufFile& gguf);
  // A published model's shape by name (for benchmarks with random weights); see shape_names().
  static ModelConfig named(const std::string& name);
  static std::vector<std::string> shape_names();
  std::string summary() const;
};

}  // namespace lw::model
