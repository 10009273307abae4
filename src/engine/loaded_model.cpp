#include "engine/loaded_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/logging.h"
#include "engine/engine.h"
#include "ops/elementwise.h"
#include "weights/gguf.h"

namespace lw::engine {

namespace {

namespace fs = std::filesystem;

// The tokenizer of a GGUF file, from its tokenizer.ggml.* metadata.
text::Tokenizer gguf_tokenizer(const weights::GgufFile& g) {
  text::TokenizerSpec spec;
  const std::string kind = g.get_string("tokenizer.ggml.model");
  if (kind == "gpt2") spec.kind = text::TokenizerKind::kByteLevelBpe;
  else if (kind == "llama") spec.kind = text::TokenizerKind::kSentencePieceBpe;
  else LW_FAIL("GGUF '" << g.path() << "': tokenizer model '" << kind << "' is not supported (gpt2, llama)");
  spec.tokens = g.get_string_array("tokenizer.ggml.tokens");
  if (g.has("tokenizer.ggml.scores")) spec.scores = g.get_f32_array("tokenizer.ggml.scores");
  if (g.has("tokenizer.ggml.token_type")) spec.token_types = g.get_i32_array("tokenizer.ggml.token_type");
  if (g.has("tokenizer.ggml.merges")) spec.merges = g.get_string_array("tokenizer.ggml.merges");
  if (g.has("tokenizer.ggml.pre")) spec.pre = g.get_string("tokenizer.ggml.pre");
  auto id = [&](const char* key) { return g.has(key) ? static_cast<int32_t>(g.get_i64(key)) : -1; };
  spec.bos_id = id("tokenizer.ggml.bos_token_id");
  spec.eos_id = id("tokenizer.ggml.eos_token_id");
  spec.unk_id = id("tokenizer.ggml.unknown_token_id");
  spec.pad_id = id("tokenizer.ggml.padding_token_id");
  spec.add_bos = g.has("tokenizer.ggml.add_bos_token") ? g.get_bool("tokenizer.ggml.add_bos_token")
                                                       : spec.kind == text::TokenizerKind::kSentencePieceBpe;
  if (g.has("tokenizer.ggml.add_space_prefix")) spec.add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix");
  return text::Tokenizer::from_spec(spec);
}

std::vector<int32_t> json_ids(const nlohmann::json& v) {
  std::vector<int32_t> ids;
  if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
  else if (v.is_array())
    for (const auto& e : v)
      if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
  return ids;
}

}  // namespace

LoadedModel::LoadedModel(Context& ctx, const std::string& path, DType dtype, const Placement& placement) {
  LW_CHECK(fs::exists(path), "model '" << path << "' does not exist (expected a model directory or a .gguf file)");
  model::ModelConfig config;
  if (fs::is_directory(path)) {
    const fs::path dir(path);
    config = model::ModelConfig::from_hf((dir / "config.json").string());
    const fs::path tok = dir / "tokenizer.json";
    LW_CHECK(fs::exists(tok), "model directory '" << path << "' has no tokenizer.json");
    tokenizer_.emplace(text::Tokenizer::from_hf(tok, dir / "tokenizer_config.json"));
    checkpoint_ = weights::open_checkpoint(path);
    eos_ids_ = config.eos_ids;
    const fs::path gen = dir / "generation_config.json";
    if (fs::exists(gen)) {
      std::ifstream in(gen);
      try {
        const auto j = nlohmann::json::parse(in);
        if (j.contains("eos_token_id")) eos_ids_ = json_ids(j["eos_token_id"]);
      } catch (const nlohmann::json::exception& e) {
        LW_FAIL("'" << gen.string() << "' is not valid JSON: " << e.what());
      }
    }
  } else {
    checkpoint_ = weights::open_checkpoint(path);
    const auto* g = dynamic_cast<const weights::GgufFile*>(checkpoint_.get());
    LW_CHECK(g, "model '" << path << "' is a single weights file without its config; pass the model directory");
    config = model::ModelConfig::from_gguf(*g);
    tokenizer_.emplace(gguf_tokenizer(*g));
    eos_ids_ = config.eos_ids;
  }
  if (tokenizer_->eos_id() >= 0 && std::find(eos_ids_.begin(), eos_ids_.end(), tokenizer_->eos_id()) == eos_ids_.end())
    eos_ids_.push_back(tokenizer_->eos_id());
  LW_CHECK(tokenizer_->vocab_size() <= config.vocab, "model '" << path << "': the tokenizer has " << tokenizer_->vocab_size()
                                                               << " tokens but the model's vocabulary only " << config.vocab);
  std::string tmpl = tokenizer_->chat_template();
  if (const auto* g = dynamic_cast<const weights::GgufFile*>(checkpoint_.get()); g && g->has("tokenizer.chat_template"))
    tmpl = g->get_string("tokenizer.chat_template");
  if (!tmpl.empty()) {
    auto piece = [&](int32_t id) { return id >= 0 ? tokenizer_->id_to_piece(id) : std::string(); };
    const std::string bos = tokenizer_->bos_token().empty() ? piece(tokenizer_->bos_id()) : tokenizer_->bos_token();
    const std::string eos = tokenizer_->eos_token().empty() ? piece(tokenizer_->eos_id()) : tokenizer_->eos_token();
    chat_.emplace(tmpl, bos, eos);
  }
  log().info("model {}: {}", path, config.summary());
  runner_ = make_runner(ctx, placement, [&](Context& c, const model::Shard& shard) {
    return model::Model::load(c, *checkpoint_, config, dtype, shard);
  });
}

std::vector<int32_t> LoadedModel::encode_prompt(const std::string& prompt, bool chat, bool allow_special_in_content) const {
  if (!chat) return tokenizer_->encode(prompt, true);
  LW_CHECK(chat_.has_value(), "this model has no chat template; run without --chat");
  // The rendered template writes its own BOS where the model wants one.
  return text::encode_chat(*tokenizer_, *chat_, {{"user", prompt}}, true, allow_special_in_content);
}

const text::ChatTemplate& LoadedModel::chat_template() const {
  LW_CHECK(chat_.has_value(), "this model has no chat template");
  return *chat_;
}

Generation LoadedModel::generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                               const std::function<void(const std::string&)>& on_text) {
  LW_CHECK(!prompt.empty(), "generate: the prompt has no tokens");
  LW_CHECK(options.max_tokens >= 0, "generate: max_tokens " << options.max_tokens << " must be >= 0");
  Generation out;
  out.finish_reason = "length";
  if (options.max_tokens == 0) return out;
  // An engine with just the blocks this one sequence can reach.
  EngineOptions eo;
  eo.num_blocks = model::KvCache::blocks_for(static_cast<int64_t>(prompt.size()) + options.max_tokens, eo.block_size);
  eo.prefix_caching = false;
  eo.deterministic = options.deterministic;
  eo.kv_cache_format = options.kv_cache_format;
  Engine engine(*runner_, &*tokenizer_, eos_ids_, eo);
  Request r;
  r.prompt = prompt;
  r.max_tokens = options.max_tokens;
  r.sampling = options.sampling;
  r.ignore_eos = !options.stop_at_eos;
  engine.add(std::move(r), [&](const RequestOutput& o) {
    out.tokens.insert(out.tokens.end(), o.tokens.begin(), o.tokens.end());
    out.text += o.text;
    if (on_text && !o.text.empty()) on_text(o.text);
    if (o.finished) out.finish_reason = o.finish_reason;
  });
  engine.run();
  return out;
}

std::vector<float> LoadedModel::score(const std::vector<int32_t>& tokens) {
  LW_CHECK(!tokens.empty(), "score: no tokens");
  const int bs = 16;
  const int64_t blocks = model::KvCache::blocks_for(static_cast<int64_t>(tokens.size()), bs);
  runner_->allocate_cache(blocks, bs, ops::KvCacheFormat::model);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  const Tensor logits = runner_->forward({{tokens, 0, table, model::SequenceChunk::Logits::all}});
  Context& ctx = runner_->context();
  Tensor f32 = ctx.empty(logits.shape(), DType::f32);
  ops::cast(ctx, logits, f32);
  const Tensor host = ctx.to_host(f32);
  return std::vector<float>(host.data<float>(), host.data<float>() + host.numel());
}

}  // namespace lw::engine
