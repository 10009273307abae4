// Opening models: every bad model is refused with a message naming the file and the problem,
// before any weights reach the device; and the default model (SmolLM2-135M-Instruct, Q4_1
// GGUF) loads with the configuration its metadata states.
#include <filesystem>
#include <fstream>

#include "engine/loaded_model.h"
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
  EXPECT_EQ(c.family, model::Family::llama);
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
