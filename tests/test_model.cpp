// Opening models: every bad model is refused with a message naming the file and the problem,
// before any weights reach the device; and the default model (SmolLM2-135M-Instruct, Q4_1
// GGUF) loads with the configuration its metadata states.
#include <filesystem>
#include <functional>
#include <fstream>

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
  EXPECT_EQ(model::find_hf_architecture("gpt_neox"), nullptr);
  EXPECT_EQ(model::find_gguf_architecture("mixtral"), nullptr);
  EXPECT_EQ(model::hf_model_types(), "llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe");
  EXPECT_EQ(model::gguf_architectures(), "llama, qwen2, qwen3");
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

// A GGUF file of metadata only: general.architecture = `arch`.
void write_gguf_header(const fs::path& path, const std::string& arch) {
  std::ofstream out(path, std::ios::binary);
  auto u32 = [&](uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { out.write(reinterpret_cast<const char*>(&v), 8); };
  auto str = [&](const std::string& v) { u64(v.size()), out.write(v.data(), static_cast<std::streamsize>(v.size())); };
  out.write("GGUF", 4);
  u32(3);  // version
  u64(0);  // tensors
  u64(1);  // key/value pairs
  str("general.architecture");
  u32(8);  // string
  str(arch);
}

TEST(Model, UnknownGgufArchitectureIsRefusedWithTheList) {
  TempDir d;
  const fs::path file = d.path() / "gpt2.gguf";
  write_gguf_header(file, "gpt2");
  expect_error([&] { model::ModelConfig::from_gguf(weights::GgufFile::open(file.string())); },
               "architecture 'gpt2' is not supported (llama, qwen2, qwen3)");
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
