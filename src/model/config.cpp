#include "model/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "model/arch/registry.h"
#include "model/config_keys.h"
#include "weights/gguf.h"

namespace lw::model {

namespace {

using nlohmann::json;

std::vector<int32_t> id_list(const json& v) {
  std::vector<int32_t> ids;
  if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
  else if (v.is_array())
    for (const auto& e : v) ids.push_back(e.get<int32_t>());
  return ids;
}

// rope_parameters (transformers 5) or rope_scaling (earlier): the scaling type and its numbers.
void read_rope(const ConfigKeys& c, const std::string& where, ops::RopeConfig& rope) {
  const char* key = c.has("rope_parameters") ? "rope_parameters" : c.has("rope_scaling") ? "rope_scaling" : nullptr;
  rope.theta = c.get<double>("rope_theta", 10000.0);
  if (!key) return;
  const json& r = c.raw(key);
  LW_CHECK(r.is_object(), where << ": '" << key << "' must be an object");
  ConfigKeys s(r, where + " " + key);
  rope.theta = s.get<double>("rope_theta", rope.theta);
  const std::string type = s.get<std::string>("rope_type", s.get<std::string>("type", "default"));
  if (type == "default") return;
  rope.factor = s.get<double>("factor");
  if (type == "linear") {
    rope.scaling = ops::RopeScaling::linear;
  } else if (type == "llama3") {
    rope.scaling = ops::RopeScaling::llama3;
    rope.low_freq_factor = s.get<double>("low_freq_factor");
    rope.high_freq_factor = s.get<double>("high_freq_factor");
    rope.original_max_position = s.get<int64_t>("original_max_position_embeddings");
  } else if (type == "yarn") {
    rope.scaling = ops::RopeScaling::yarn;
    rope.original_max_position = s.get<int64_t>("original_max_position_embeddings", rope.original_max_position);
    rope.beta_fast = s.get<double>("beta_fast", 32.0);
    rope.beta_slow = s.get<double>("beta_slow", 1.0);
    rope.attention_factor = s.get<double>("attention_factor", 0.0);
  } else {
    LW_FAIL(where << ": rope type '" << type << "' is not supported (default, linear, llama3, yarn)");
  }
}

}  // namespace

namespace {

// quantization_config: the schemes whose weights the loader reads (8-bit values with scales),
// anything else refused by name.
WeightQuantization read_quantization(const ConfigKeys& c) {
  WeightQuantization q;
  // Early compressed-tensors checkpoints name it compression_config.
  const char* key = c.has("quantization_config") ? "quantization_config"
                    : c.has("compression_config") ? "compression_config"
                                                  : nullptr;
  if (!key) return q;
  const std::string where = c.where() + ": " + key;
  const json& j = c.raw(key);
  LW_CHECK(j.is_object(), where << " must be an object");
  const ConfigKeys qc(j, where);
  q.method = qc.get<std::string>("quant_method");
  auto block = [&](const json& b, const char* key) {
    LW_CHECK(b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer() && b[0].get<int64_t>() > 0 &&
                 b[1].get<int64_t>() > 0,
             where << ": " << key << " " << b.dump() << " must be two positive integers [rows, columns]");
    q.block_rows = b[0].get<int64_t>();
    q.block_cols = b[1].get<int64_t>();
  };
  if (q.method == "fp8") {
    // transformers' FineGrainedFP8Config: blocks of 128 x 128 unless weight_block_size says
    // otherwise (scales of one value or one per row are told apart by their shapes).
    q.block_rows = q.block_cols = 128;
    if (qc.has("weight_block_size")) block(qc.raw("weight_block_size"), "weight_block_size");
    return q;
  }
  auto read_group = [&](int64_t g, const std::string& at) {
    LW_CHECK(g == -1 || g > 0, at << ": group_size " << g << " must be positive or -1 (one group per output row)");
    return g;
  };
  if (q.method == "gptq") {
    const int bits = qc.get<int>("bits");
    LW_CHECK(bits == 4 || bits == 8, where << ": " << bits << "-bit GPTQ weights are not supported (4-bit, 8-bit)");
    q.gptq_bits = bits;
    const std::string format = qc.get<std::string>("checkpoint_format", "gptq");
    LW_CHECK(format == "gptq" || format == "gptq_v2",
             where << ": GPTQ checkpoint_format '" << format << "' is not supported (gptq, gptq_v2)");
    q.gptq_v2 = format == "gptq_v2";
    q.group_size = read_group(qc.get<int64_t>("group_size", 128), where);
    return q;
  }
  if (q.method == "awq") {
    const int bits = qc.get<int>("bits", qc.get<int>("w_bit", 4));
    const std::string version = qc.get<std::string>("version", "gemm");
    LW_CHECK(bits == 4 && (version == "gemm" || version == "GEMM"),
             where << ": AWQ " << bits << "-bit weights of version '" << version << "' are not supported (4-bit, gemm)");
    LW_CHECK(qc.get<bool>("zero_point", true), where << ": AWQ without zero points is not supported");
    q.group_size = read_group(qc.get<int64_t>("group_size", qc.get<int64_t>("q_group_size", 128)), where);
    return q;
  }
  LW_CHECK(q.method == "compressed-tensors",
           where << ": quant_method '" << q.method
                 << "' is not supported (fp8, gptq, awq, compressed-tensors)");
  const std::string format = qc.get<std::string>("format", "");
  LW_CHECK(format == "float-quantized" || format == "int-quantized" || format == "naive-quantized" ||
               format == "pack-quantized",
           where << ": compressed-tensors format '" << format
                 << "' is not supported (float-quantized, int-quantized, naive-quantized: 8-bit weights; pack-quantized: "
                    "4-bit)");
  const bool packed = format == "pack-quantized";
  LW_CHECK(qc.has("config_groups") && qc.raw("config_groups").is_object() && !qc.raw("config_groups").empty(),
           where << ": compressed-tensors needs config_groups");
  for (const auto& [name, group] : qc.raw("config_groups").items()) {
    const std::string at = where + ".config_groups." + name;
    LW_CHECK(group.is_object() && group.contains("weights") && group["weights"].is_object(), at << " has no weights scheme");
    const ConfigKeys w(group["weights"], at + ".weights");
    const int bits = w.get<int>("num_bits");
    const std::string type = w.get<std::string>("type"), strategy = w.get<std::string>("strategy");
    if (packed) {
      LW_CHECK(bits == 4 && type == "int", at << ": pack-quantized " << bits << "-bit " << type
                                               << " weights are not supported (4-bit int)");
      const bool asymmetric = !w.get<bool>("symmetric", true);
      LW_CHECK(q.group_size == 0 || q.int4_asymmetric == asymmetric,
               where << ": config groups with symmetric and asymmetric 4-bit weights are not supported");
      q.int4_asymmetric = asymmetric;
      LW_CHECK(strategy == "group" || strategy == "channel",
               at << ": 4-bit weight strategy '" << strategy << "' is not supported (group, channel)");
      const int64_t g = strategy == "channel" ? -1 : read_group(w.get<int64_t>("group_size"), at);
      LW_CHECK(q.group_size == 0 || q.group_size == g, where << ": config groups with different group sizes are not supported");
      q.group_size = g;
      continue;
    }
    LW_CHECK(bits == 8 && (type == "float" || type == "int"),
             at << ": " << bits << "-bit " << type << " weights are not supported (8-bit float or int)");
    LW_CHECK(w.get<bool>("symmetric", true), at << ": asymmetric weights (zero points) are not supported");
    LW_CHECK(strategy == "tensor" || strategy == "channel" || strategy == "block",
             at << ": weight strategy '" << strategy << "' is not supported (tensor, channel, block)");
    const bool activations = group.contains("input_activations") && !group["input_activations"].is_null();
    if (type == "int") q.int8_activations = activations;
    if (strategy == "block") {
      const int64_t rows = q.block_rows, cols = q.block_cols;
      LW_CHECK(w.has("block_structure"), at << ": the block strategy needs block_structure");
      block(w.raw("block_structure"), "block_structure");
      LW_CHECK(rows == 0 || (rows == q.block_rows && cols == q.block_cols),
               where << ": config groups with different block structures are not supported");
    }
  }
  return q;
}

}  // namespace

ModelConfig ModelConfig::from_hf(const std::string& path) {
  std::ifstream in(path);
  LW_CHECK(in, "cannot open model config '" << path << "'");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    LW_FAIL("model config '" << path << "' is not valid JSON: " << e.what());
  }
  const ConfigKeys c(j, "model config '" + path + "'");
  ModelConfig m;
  const std::string type = c.get<std::string>("model_type");
  const Architecture* arch = find_hf_architecture(type);
  LW_CHECK(arch, "model config '" << path << "': model_type '" << type << "' is not supported (" << hf_model_types() << ")");
  m.architecture = arch->name;

  m.vocab = c.get<int64_t>("vocab_size");
  m.hidden = c.get<int64_t>("hidden_size");
  m.layers = c.get<int64_t>("num_hidden_layers");
  m.heads = c.get<int64_t>("num_attention_heads");
  m.kv_heads = c.get<int64_t>("num_key_value_heads", m.heads);
  m.head_dim = c.get<int64_t>("head_dim", m.heads ? m.hidden / m.heads : 0);
  m.intermediate = c.get<int64_t>("intermediate_size", 0);
  m.rms_eps = c.get<double>("rms_norm_eps", 1e-6);
  m.max_position = c.get<int64_t>("max_position_embeddings", 4096);
  m.tie_embeddings = c.get<bool>("tie_word_embeddings", false);
  read_rope(c, "model config '" + path + "'", m.rope);
  m.rope.rotary_dim = static_cast<int>(m.head_dim * c.get<double>("partial_rotary_factor", 1.0));
  m.rope.neox = true;
  if (c.has("bos_token_id")) m.bos_id = c.get<int32_t>("bos_token_id");
  if (c.has("eos_token_id")) m.eos_ids = id_list(c.raw("eos_token_id"));
  const std::string dtype = c.get<std::string>("torch_dtype", c.get<std::string>("dtype", "bfloat16"));
  m.checkpoint_dtype = parse_dtype(dtype);
  m.quantization = read_quantization(c);
  LW_CHECK(m.vocab > 0 && m.hidden > 0 && m.layers > 0 && m.heads > 0 && m.kv_heads > 0 && m.head_dim > 0,
           "model config '" << path << "': sizes must be positive (vocab " << m.vocab << ", hidden " << m.hidden << ", layers "
                            << m.layers << ", heads " << m.heads << "/" << m.kv_heads << ", head_dim " << m.head_dim << ")");
  LW_CHECK(m.heads % m.kv_heads == 0, "model config '" << path << "': " << m.heads << " heads are not a multiple of "
                                                       << m.kv_heads << " key/value heads");
  LW_CHECK(!c.get<bool>("mlp_bias", false), "model config '" << path << "': mlp_bias = true is not supported");
  m.moe_layer.assign(static_cast<size_t>(m.layers), false);

  // The family's own keys: the block variant, experts, sliding window.
  arch->read_hf(c, m);
  // Qwen2's use_sliding_window windows only the layers from max_window_layers on: read as a cap
  // on the context, below which no layer's window matters.
  if (c.get<bool>("use_sliding_window", false))
    m.max_position = std::min<int64_t>(m.max_position, c.get<int64_t>("sliding_window"));
  return m;
}

ModelConfig ModelConfig::from_gguf(const weights::GgufFile& g) {
  const std::string arch = g.get_string("general.architecture");
  ModelConfig m;
  m.gguf = true;
  const Architecture* def = find_gguf_architecture(arch);
  LW_CHECK(def, "GGUF '" << g.path() << "': architecture '" << arch << "' is not supported (" << gguf_architectures() << ")");
  auto key = [&](const char* k) { return arch + "." + k; };
  // Mixtral's files are "llama" files with experts.
  const int64_t experts = g.has(key("expert_count")) ? g.get_i64(key("expert_count")) : 0;
  if (experts > 0 && def->name == "llama") def = &model::architecture("mixtral");
  m.architecture = def->name;
  m.hidden = g.get_i64(key("embedding_length"));
  m.layers = g.get_i64(key("block_count"));
  m.heads = g.get_i64(key("attention.head_count"));
  m.kv_heads = g.has(key("attention.head_count_kv")) ? g.get_i64(key("attention.head_count_kv")) : m.heads;
  m.head_dim = g.has(key("attention.key_length")) ? g.get_i64(key("attention.key_length")) : m.hidden / m.heads;
  m.intermediate = g.get_i64(key("feed_forward_length"));
  m.rms_eps = g.get_f32(key("attention.layer_norm_rms_epsilon"));
  m.max_position = g.get_i64(key("context_length"));
  m.rope.theta = g.has(key("rope.freq_base")) ? g.get_f32(key("rope.freq_base")) : 10000.0;
  m.rope.rotary_dim = static_cast<int>(g.has(key("rope.dimension_count")) ? g.get_i64(key("rope.dimension_count")) : m.head_dim);
  // Half-split RoPE unless the family says otherwise (llama.cpp permutes Llama's q/k rows).
  m.rope.neox = true;
  if (g.has(key("rope.scaling.type"))) {
    const std::string type = g.get_string(key("rope.scaling.type"));
    if (type == "linear") {
      m.rope.scaling = ops::RopeScaling::linear;
      m.rope.factor = g.get_f32(key("rope.scaling.factor"));
    } else if (type != "none") {
      LW_FAIL("GGUF '" << g.path() << "': rope scaling '" << type << "' is not supported (none, linear)");
    }
  }
  m.vocab = g.has(key("vocab_size")) ? g.get_i64(key("vocab_size"))
                                     : static_cast<int64_t>(g.get_string_array("tokenizer.ggml.tokens").size());
  m.tie_embeddings = g.find("output.weight") == nullptr;
  m.qkv_bias = g.find("blk.0.attn_q.bias") != nullptr;
  m.qk_norm = g.find("blk.0.attn_q_norm.weight") != nullptr;
  m.moe_layer.assign(static_cast<size_t>(m.layers), false);
  if (experts > 0) {
    // Every layer a mixture of experts (llama.cpp's qwen2moe, qwen3moe and Mixtral); the
    // experts' width is their stacked tensors' ([experts, width, hidden]).
    LW_CHECK(def->name != "llama" && def->name != "qwen2" && def->name != "qwen3",
             "GGUF '" << g.path() << "': architecture '" << arch << "' with " << experts << " experts is not supported");
    m.experts = static_cast<int>(experts);
    m.experts_per_token = static_cast<int>(g.get_i64(key("expert_used_count")));
    LW_CHECK(m.experts_per_token > 0 && m.experts_per_token <= m.experts,
             "GGUF '" << g.path() << "': " << m.experts_per_token << " experts per token of " << m.experts);
    const weights::TensorRecord* gate = g.find("blk.0.ffn_gate_exps.weight");
    LW_CHECK(gate && gate->shape.size() == 3 && gate->shape[0] == experts,
             "GGUF '" << g.path() << "': " << experts << " experts, but no stacked expert tensor 'blk.0.ffn_gate_exps.weight' of "
                      << experts << " experts");
    m.moe_intermediate = gate->shape[1];
    m.moe_layer.assign(static_cast<size_t>(m.layers), true);
  }
  if (g.has("tokenizer.ggml.bos_token_id")) m.bos_id = static_cast<int32_t>(g.get_i64("tokenizer.ggml.bos_token_id"));
  if (g.has("tokenizer.ggml.eos_token_id")) m.eos_ids = {static_cast<int32_t>(g.get_i64("tokenizer.ggml.eos_token_id"))};
  m.checkpoint_dtype = DType::f32;
  if (def->read_gguf) def->read_gguf(g, arch, m);
  return m;
}

namespace {

// name, architecture, vocab, hidden, layers, heads, kv heads, head_dim, intermediate, theta, tied,
// experts, top-k, expert width
struct NamedShape {
  const char* name;
  const char* arch;
  int64_t vocab, hidden, layers, heads, kv_heads, head_dim, intermediate;
  double theta;
  bool tied;
  int experts, top_k;
  int64_t moe_intermediate;
};
constexpr NamedShape kShapes[] = {
    {"llama3-8b", "llama", 128256, 4096, 32, 32, 8, 128, 14336, 500000.0, false, 0, 0, 0},
    {"llama3.2-1b", "llama", 128256, 2048, 16, 32, 8, 64, 8192, 500000.0, true, 0, 0, 0},
    {"qwen2.5-7b", "qwen2", 152064, 3584, 28, 28, 4, 128, 18944, 1000000.0, false, 0, 0, 0},
    {"qwen3-30b-a3b", "qwen3_moe", 151936, 2048, 48, 32, 4, 128, 6144, 1000000.0, false, 128, 8, 768},
    {"smollm2-135m", "llama", 49152, 576, 30, 9, 3, 64, 1536, 100000.0, true, 0, 0, 0},
};

}  // namespace

std::vector<std::string> ModelConfig::shape_names() {
  std::vector<std::string> names;
  for (const auto& s : kShapes) names.push_back(s.name);
  return names;
}

ModelConfig ModelConfig::named(const std::string& name) {
  for (const auto& s : kShapes) {
    if (name != s.name) continue;
    ModelConfig m;
    const Architecture& arch = model::architecture(s.arch);
    m.architecture = arch.name;
    m.vocab = s.vocab, m.hidden = s.hidden, m.layers = s.layers;
    m.heads = s.heads, m.kv_heads = s.kv_heads, m.head_dim = s.head_dim, m.intermediate = s.intermediate;
    m.rms_eps = 1e-5;
    m.rope.theta = s.theta;
    m.rope.rotary_dim = static_cast<int>(s.head_dim);
    m.max_position = 32768;
    m.tie_embeddings = s.tied;
    m.experts = s.experts, m.experts_per_token = s.top_k, m.moe_intermediate = s.moe_intermediate;
    m.norm_topk_prob = true;
    m.moe_layer.assign(static_cast<size_t>(m.layers), s.experts > 0);
    if (arch.named_defaults) arch.named_defaults(m);
    return m;
  }
  std::string names;
  for (const auto& s : kShapes) names += std::string(names.empty() ? "" : ", ") + s.name;
  LW_FAIL("unknown model shape '" << name << "' (" << names << ")");
}

std::string ModelConfig::summary() const {
  std::ostringstream s;
  s << architecture << ": " << layers << " layers, hidden " << hidden << ", heads " << heads << "/" << kv_heads << " x "
    << head_dim << ", vocab " << vocab;
  if (experts) s << ", " << experts << " experts (top " << experts_per_token << ")";
  if (sliding_window > 0) s << ", sliding window " << sliding_window;
  return s.str();
}

}  // namespace lw::model
