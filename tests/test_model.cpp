// Opening models: every bad model is refused with a message naming the file and the problem,
// before any weights reach the device; and the default model (SmolLM2-135M-Instruct, Q4_1
// GGUF) loads with the configuration its metadata states.
#include <filesystem>
#include <functional>
#include <fstream>
#include <variant>

#include "engine/loaded_model.h"
#include "model/arch/registry.h"
#include "model/config.h"
#include "weights/gguf.h"
#include "test_util.h"

namespace lw::test {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system's temporary folder, removed at the end of the test.
class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("lw_model_test_" + std::to_string(seed()) + "_" + std::to_string(counter_++))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path_ / name) << text; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

void expect_open_error(const std::string& path, const std::string& text) {
  try {
    engine::LoadedModel g(ctx(), path, DType::f32);
    ADD_FAILURE() << "opening '" << path << "' succeeded; expected an error containing '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

const char* kLlamaConfig = R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1,
  "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 40, "torch_dtype": "float32"})";

std::string smollm2_path() {
  const char* env = std::getenv("LW_SMOLLM2_GGUF");
  return env ? env : LW_SMOLLM2_GGUF;
}

TEST(Model, MissingPathIsNamed) { expect_open_error("/nonexistent/model", "'/nonexistent/model' does not exist"); }

TEST(Model, UnsupportedArchitectureIsNamed) {
  TempDir d;
  d.write("config.json", R"({"model_type": "gpt_neox", "vocab_size": 10})");
  expect_open_error(d.path().string(), "model_type 'gpt_neox' is not supported");
}

// The registry lists every supported family, each found under its config.json model_type
// and, for the GGUF families, its general.architecture.
TEST(Model, RegistryNamesEverySupportedFamily) {
  std::vector<std::string> names;
  for (const model::Architecture* a : model::architectures()) names.push_back(a->name);
  EXPECT_EQ(names, (std::vector<std::string>{"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe"}));
  for (const std::string& n : names) {
    const model::Architecture* a = model::find_hf_architecture(n);
    ASSERT_NE(a, nullptr) << n;
    EXPECT_EQ(a->name, n);
    EXPECT_EQ(&model::architecture(n), a);
  }
  for (const std::string n : {"llama", "qwen2", "qwen3"}) {
    const model::Architecture* a = model::find_gguf_architecture(n);
    ASSERT_NE(a, nullptr) << n;
    EXPECT_EQ(a->name, n);
  }
  EXPECT_EQ(model::find_gguf_architecture("qwen2moe")->name, "qwen2_moe");
  EXPECT_EQ(model::find_gguf_architecture("qwen3moe")->name, "qwen3_moe");
  EXPECT_EQ(model::find_hf_architecture("gpt_neox"), nullptr);
  EXPECT_EQ(model::find_gguf_architecture("mixtral"), nullptr);
  EXPECT_EQ(model::hf_model_types(), "llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe");
  EXPECT_EQ(model::gguf_architectures(), "llama, qwen2, qwen3, qwen2moe, qwen3moe");
}

void expect_error(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Model, UnknownModelTypeIsRefusedWithTheList) {
  TempDir d;
  d.write("config.json", R"({"model_type": "gpt_neox", "vocab_size": 10})");
  expect_error([&] { model::ModelConfig::from_hf((d.path() / "config.json").string()); },
               "model_type 'gpt_neox' is not supported (llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe)");
  model::ModelConfig c = model::ModelConfig::named("smollm2-135m");
  c.architecture = "gpt_neox";
  expect_error([&] { model::Model::random(ctx(), c, DType::f32); }, "model architecture 'gpt_neox' is not supported (llama,");
}

// A GGUF v3 file of metadata `kv` (u32, f32 or string values) and F32 tensors of zeros (shapes
// outermost first, as lightwave reads them).
using GgufValue = std::variant<uint32_t, float, std::string>;
void write_gguf(const fs::path& path, const std::vector<std::pair<std::string, GgufValue>>& kv,
                const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors = {}) {
  std::ofstream out(path, std::ios::binary);
  auto u32 = [&](uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { out.write(reinterpret_cast<const char*>(&v), 8); };
  auto str = [&](const std::string& v) { u64(v.size()), out.write(v.data(), static_cast<std::streamsize>(v.size())); };
  out.write("GGUF", 4);
  u32(3);  // version
  u64(tensors.size());
  u64(kv.size());
  for (const auto& [key, value] : kv) {
    str(key);
    if (const auto* u = std::get_if<uint32_t>(&value)) u32(4), u32(*u);
    else if (const auto* f = std::get_if<float>(&value)) u32(6), out.write(reinterpret_cast<const char*>(f), 4);
    else u32(8), str(std::get<std::string>(value));
  }
  uint64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    str(name);
    u32(static_cast<uint32_t>(shape.size()));
    uint64_t elements = 1;
    for (auto d = shape.rbegin(); d != shape.rend(); ++d) u64(static_cast<uint64_t>(*d)), elements *= static_cast<uint64_t>(*d);
    u32(0);  // F32
    u64(offset);
    offset += (elements * 4 + 31) / 32 * 32;
  }
  const std::streamoff at = out.tellp();
  out.write(std::string(static_cast<size_t>((32 - at % 32) % 32) + offset, '\0').data(),
            static_cast<std::streamsize>((32 - at % 32) % 32 + offset));
}

// A GGUF file of metadata only: general.architecture = `arch`.
void write_gguf_header(const fs::path& path, const std::string& arch) { write_gguf(path, {{"general.architecture", arch}}); }

// Mixture-of-experts GGUF files (llama.cpp's qwen3moe, qwen2moe with its shared expert's width,
// and Mixtral as a "llama" file with experts): every layer a mixture, the experts' width their
// stacked tensors'; experts in a dense family or without their stacked tensors are refused.
TEST(Model, GgufMixtureOfExpertsConfigsAreRead) {
  TempDir d;
  auto read = [&](const std::string& arch, uint32_t experts, bool stacked, bool shared = false) {
    std::vector<std::pair<std::string, GgufValue>> kv = {{"general.architecture", arch}};
    auto key = [&](const char* k, GgufValue v) { kv.emplace_back(arch + "." + k, std::move(v)); };
    key("embedding_length", 64u), key("block_count", 3u), key("attention.head_count", 4u);
    key("attention.head_count_kv", 2u), key("feed_forward_length", 96u), key("attention.layer_norm_rms_epsilon", 1e-6f);
    key("context_length", 512u), key("vocab_size", 100u), key("expert_count", experts), key("expert_used_count", 2u);
    if (shared) key("expert_shared_feed_forward_length", 80u);
    std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
    if (stacked) tensors.push_back({"blk.0.ffn_gate_exps.weight", {experts, 48, 64}});
    const fs::path file = d.path() / (arch + ".gguf");
    write_gguf(file, kv, tensors);
    return model::ModelConfig::from_gguf(weights::GgufFile::open(file.string()));
  };
  const model::ModelConfig q3 = read("qwen3moe", 8, true);
  EXPECT_EQ(q3.architecture, "qwen3_moe");
  EXPECT_EQ(q3.experts, 8);
  EXPECT_EQ(q3.experts_per_token, 2);
  EXPECT_EQ(q3.moe_intermediate, 48);
  EXPECT_TRUE(q3.norm_topk_prob);
  EXPECT_EQ(q3.moe_layer, std::vector<bool>(3, true));
  const model::ModelConfig q2 = read("qwen2moe", 4, true, true);
  EXPECT_EQ(q2.architecture, "qwen2_moe");
  EXPECT_FALSE(q2.norm_topk_prob);
  EXPECT_EQ(q2.shared_intermediate, 80);
  const model::ModelConfig mixtral = read("llama", 4, true);
  EXPECT_EQ(mixtral.architecture, "mixtral");
  EXPECT_TRUE(mixtral.norm_topk_prob);
  EXPECT_FALSE(mixtral.rope.neox);  // llama.cpp's permuted q/k rows
  EXPECT_EQ(read("llama", 0, false).architecture, "llama");
  expect_error([&] { read("qwen3", 4, true); }, "architecture 'qwen3' with 4 experts is not supported");
  expect_error([&] { read("qwen3moe", 8, false); }, "no stacked expert tensor 'blk.0.ffn_gate_exps.weight'");
}

TEST(Model, UnknownGgufArchitectureIsRefusedWithTheList) {
  TempDir d;
  const fs::path file = d.path() / "gpt2.gguf";
  write_gguf_header(file, "gpt2");
  expect_error([&] { model::ModelConfig::from_gguf(weights::GgufFile::open(file.string())); },
               "architecture 'gpt2' is not supported (llama, qwen2, qwen3, qwen2moe, qwen3moe)");
}

// quantization_config: the 8-bit schemes the loader reads (their block size), the rest refused
// by name.
TEST(Model, QuantizationConfigIsReadOrRefused) {
  TempDir d;
  auto read = [&](const std::string& q) {
    d.write("config.json", R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
      "num_attention_heads": 2, "intermediate_size": 40, "quantization_config": )" + q + "}");
    return model::ModelConfig::from_hf((d.path() / "config.json").string());
  };
  model::WeightQuantization q = read(R"({"quant_method": "fp8", "activation_scheme": "dynamic",
      "weight_block_size": [128, 64]})").quantization;
  EXPECT_EQ(q.method, "fp8");
  EXPECT_EQ(q.block_rows, 128);
  EXPECT_EQ(q.block_cols, 64);
  q = read(R"({"quant_method": "fp8", "activation_scheme": "static"})").quantization;
  EXPECT_EQ(q.block_rows, 128);  // transformers' default block
  EXPECT_EQ(q.block_cols, 128);
  const std::string group = R"({"quant_method": "compressed-tensors", "format": "FORMAT", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": WEIGHTS}}})";
  auto ct = [&](const std::string& format, const std::string& weights) {
    std::string s = group;
    s.replace(s.find("FORMAT"), 6, format);
    s.replace(s.find("WEIGHTS"), 7, weights);
    return read(s).quantization;
  };
  q = ct("float-quantized", R"({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true})");
  EXPECT_EQ(q.method, "compressed-tensors");
  EXPECT_EQ(q.block_rows, 0);
  q = ct("float-quantized", R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]})");
  EXPECT_EQ(q.block_rows, 128);
  // int8 with int8 activations (W8A8), and weight-only int8 (W8A16: expanded at load).
  std::string w8a8 = group;
  w8a8.replace(w8a8.find("FORMAT"), 6, "int-quantized");
  w8a8.replace(w8a8.find("WEIGHTS"), 7, R"({"num_bits": 8, "type": "int", "strategy": "channel"},
      "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true})");
  EXPECT_TRUE(read(w8a8).quantization.int8_activations);
  q = ct("int-quantized", R"({"num_bits": 8, "type": "int", "strategy": "tensor"})");
  EXPECT_EQ(q.method, "compressed-tensors");
  EXPECT_FALSE(q.int8_activations);
  EXPECT_EQ(read("{\"quant_method\": \"fp8\"}").quantization.method, "fp8");
  EXPECT_EQ(model::ModelConfig::named("smollm2-135m").quantization.method, "");
  // The key's earlier name.
  d.write("config.json", R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
      "num_attention_heads": 2, "intermediate_size": 40, "compression_config": {"quant_method": "compressed-tensors",
      "format": "float-quantized", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float",
      "strategy": "channel"}}}}})");
  EXPECT_EQ(model::ModelConfig::from_hf((d.path() / "config.json").string()).quantization.method, "compressed-tensors");

  // 4-bit schemes: the group size (-1: one per output row) and GPTQ's zero-point convention.
  q = read(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true})").quantization;
  EXPECT_EQ(q.group_size, 128);
  EXPECT_EQ(q.gptq_bits, 4);
  EXPECT_FALSE(q.gptq_v2);
  q = read(R"({"quant_method": "gptq", "bits": 8, "group_size": 32, "sym": true})").quantization;
  EXPECT_EQ(q.gptq_bits, 8);
  EXPECT_EQ(q.group_size, 32);
  q = read(R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "checkpoint_format": "gptq_v2"})").quantization;
  EXPECT_EQ(q.group_size, -1);
  EXPECT_TRUE(q.gptq_v2);
  EXPECT_EQ(read(R"({"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm", "zero_point": true})")
                .quantization.group_size,
            64);
  EXPECT_EQ(ct("pack-quantized", R"({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32})").group_size, 32);
  EXPECT_EQ(ct("pack-quantized", R"({"num_bits": 4, "type": "int", "strategy": "channel"})").group_size, -1);
  expect_error([&] { read(R"({"quant_method": "gptq", "bits": 3})"); }, "3-bit GPTQ weights are not supported (4-bit, 8-bit)");
  expect_error([&] { read(R"({"quant_method": "gptq", "bits": 4, "group_size": 0})"); }, "group_size 0 must be positive or -1");
  expect_error([&] { read(R"({"quant_method": "gptq", "bits": 4, "checkpoint_format": "marlin"})"); },
               "GPTQ checkpoint_format 'marlin' is not supported (gptq, gptq_v2)");
  expect_error([&] { read(R"({"quant_method": "awq", "bits": 4, "version": "gemv"})"); },
               "AWQ 4-bit weights of version 'gemv' are not supported (4-bit, gemm)");
  expect_error([&] { read(R"({"quant_method": "bitsandbytes"})"); },
               "quant_method 'bitsandbytes' is not supported (fp8, gptq, awq, compressed-tensors)");
  expect_error([&] { read(R"({"quant_method": "fp8", "weight_block_size": [128]})"); },
               "weight_block_size [128] must be two positive integers");
  const model::WeightQuantization asym =
      ct("pack-quantized", R"({"num_bits": 4, "type": "int", "strategy": "group", "symmetric": false, "group_size": 32})");
  EXPECT_TRUE(asym.int4_asymmetric);
  EXPECT_EQ(asym.group_size, 32);
  EXPECT_FALSE(ct("pack-quantized", R"({"num_bits": 4, "type": "int", "strategy": "channel"})").int4_asymmetric);
  expect_error([&] { ct("pack-quantized", R"({"num_bits": 4, "type": "int", "strategy": "tensor"})"); },
               "4-bit weight strategy 'tensor' is not supported (group, channel)");
  expect_error([&] { ct("marlin-24", R"({"num_bits": 4, "type": "int", "strategy": "group"})"); },
               "compressed-tensors format 'marlin-24' is not supported");
  expect_error([&] { ct("int-quantized", R"({"num_bits": 4, "type": "int", "strategy": "channel"})"); },
               "4-bit int weights are not supported (8-bit float or int)");
  expect_error([&] { ct("int-quantized", R"({"num_bits": 8, "type": "int", "strategy": "group", "group_size": 128})"); },
               "weight strategy 'group' is not supported (tensor, channel, block)");
  expect_error([&] { ct("int-quantized", R"({"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": false})"); },
               "asymmetric weights (zero points) are not supported");
  expect_error([&] { ct("float-quantized", R"({"num_bits": 8, "type": "float", "strategy": "block"})"); },
               "the block strategy needs block_structure");
}

// The families' own config.json keys, read by their definitions.
TEST(Model, FamilyKeysAreRead) {
  TempDir d;
  auto read = [&](const std::string& extra) {
    d.write("config.json", R"({"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2,
      "intermediate_size": 40, "max_position_embeddings": 8192, )" + extra + "}");
    return model::ModelConfig::from_hf((d.path() / "config.json").string());
  };
  const model::ModelConfig llama = read(R"("model_type": "llama", "attention_bias": true)");
  EXPECT_TRUE(llama.qkv_bias && llama.o_bias && !llama.qk_norm);
  EXPECT_EQ(llama.moe_layer, std::vector<bool>(4, false));
  const model::ModelConfig mistral = read(R"("model_type": "mistral", "sliding_window": 4096)");
  EXPECT_EQ(mistral.sliding_window, 4096);
  EXPECT_EQ(mistral.max_position, 8192);  // the window is not a cap on the context
  EXPECT_EQ(read(R"("model_type": "mistral", "sliding_window": null)").sliding_window, 0);
  EXPECT_EQ(read(R"("model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 64)")
                .sliding_window,
            64);
  EXPECT_EQ(read(R"("model_type": "llama", "sliding_window": 4096)").max_position, 8192);
  const model::ModelConfig qwen2 = read(R"("model_type": "qwen2")");
  EXPECT_TRUE(qwen2.qkv_bias && !qwen2.o_bias && !qwen2.qk_norm);
  const model::ModelConfig qwen3 = read(R"("model_type": "qwen3")");
  EXPECT_TRUE(!qwen3.qkv_bias && qwen3.qk_norm);
  const model::ModelConfig mixtral = read(R"("model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2)");
  EXPECT_EQ(mixtral.experts, 8);
  EXPECT_EQ(mixtral.moe_intermediate, 40);
  EXPECT_EQ(mixtral.moe_layer, std::vector<bool>(4, true));
  const model::ModelConfig qwen2_moe = read(R"("model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24, "decoder_sparse_step": 2, "mlp_only_layers": [3])");
  EXPECT_TRUE(qwen2_moe.qkv_bias);
  EXPECT_EQ(qwen2_moe.shared_intermediate, 24);
  EXPECT_FALSE(qwen2_moe.norm_topk_prob);
  EXPECT_EQ(qwen2_moe.moe_layer, (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(model::block_variant(qwen2_moe, 1).mlp, model::MlpVariant::moe_shared_expert);
  EXPECT_EQ(model::block_variant(qwen2_moe, 0).mlp, model::MlpVariant::dense);
  const model::ModelConfig qwen3_moe = read(R"("model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 16, "norm_topk_prob": true)");
  EXPECT_TRUE(qwen3_moe.qk_norm && qwen3_moe.norm_topk_prob);
  EXPECT_EQ(qwen3_moe.shared_intermediate, 0);
  EXPECT_EQ(model::block_variant(qwen3_moe, 0).mlp, model::MlpVariant::moe);
  EXPECT_EQ(qwen3_moe.summary(), "qwen3_moe: 4 layers, hidden 32, heads 2/2 x 16, vocab 64, 4 experts (top 2)");
  // The named benchmark shapes take their family's fixed variant.
  EXPECT_TRUE(model::ModelConfig::named("qwen2.5-7b").qkv_bias);
  const model::ModelConfig a3b = model::ModelConfig::named("qwen3-30b-a3b");
  EXPECT_TRUE(a3b.qk_norm && !a3b.qkv_bias);
  EXPECT_EQ(a3b.architecture, "qwen3_moe");
  const model::ModelConfig smol = model::ModelConfig::named("smollm2-135m");
  EXPECT_TRUE(!smol.qkv_bias && !smol.qk_norm);
}

TEST(Model, MalformedConfigIsNamed) {
  TempDir d;
  d.write("config.json", "{\"model_type\": \"llama\",");
  expect_open_error(d.path().string(), "config.json' is not valid JSON");
}

TEST(Model, MissingConfigKeyIsNamed) {
  TempDir d;
  d.write("config.json", R"({"model_type": "llama", "vocab_size": 64})");
  expect_open_error(d.path().string(), "missing required key 'hidden_size'");
}

TEST(Model, UnsupportedDtypeIsNamed) {
  TempDir d;
  std::string cfg = kLlamaConfig;
  cfg.replace(cfg.find("float32"), 7, "float8_e4m3");
  d.write("config.json", cfg);
  expect_open_error(d.path().string(), "float8_e4m3");
}

TEST(Model, MissingTokenizerIsNamed) {
  TempDir d;
  d.write("config.json", kLlamaConfig);
  expect_open_error(d.path().string(), "has no tokenizer.json");
}

TEST(Model, TruncatedGgufIsNamed) {
  const std::string src = smollm2_path();
  if (!fs::exists(src)) GTEST_SKIP() << src << " is absent (scripts/fetch_model.sh fetches it)";
  TempDir d;
  const fs::path cut = d.path() / "cut.gguf";
  fs::copy_file(src, cut);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  expect_open_error(cut.string(), "truncated");
}

TEST(Model, SmolLM2ConfigFromGgufMetadata) {
  const std::string path = smollm2_path();
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent (scripts/fetch_model.sh fetches it)";
  engine::LoadedModel g(ctx(), path, DType::bf16);
  const model::ModelConfig& c = g.config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.layers, 30);
  EXPECT_EQ(c.hidden, 576);
  EXPECT_EQ(c.heads, 9);
  EXPECT_EQ(c.kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate, 1536);
  EXPECT_EQ(c.vocab, 49152);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(c.rope.neox);  // llama.cpp's permuted q/k rows rotate adjacent pairs
  EXPECT_DOUBLE_EQ(c.rope.theta, 100000.0);
  EXPECT_TRUE(g.has_chat_template());
  // Greedy answers are the same token for token when run twice.
  engine::GenerateOptions opt;
  opt.max_tokens = 4;
  const std::vector<int32_t> prompt = g.encode_prompt("Hello", false);
  EXPECT_EQ(g.generate(prompt, opt).tokens, g.generate(prompt, opt).tokens);
}

}  // namespace
}  // namespace lw::test
