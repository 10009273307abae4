// A model ready to generate text: the weights, the tokenizer and chat template, and the stop
// tokens, opened from a Hugging Face directory or a GGUF file; and the generation of one
// completion through the engine, with streamed, UTF-8-whole text.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/context.h"
#include "model/config.h"
#include "engine/model_runner.h"
#include "model/model.h"
#include "ops/sampling.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "weights/checkpoint.h"

namespace lw::engine {

struct GenerateOptions {
  int max_tokens = 128;
  ops::SamplingOptions sampling;  // temperature 0: greedy
  bool stop_at_eos = true;
  bool deterministic = false;  // EngineOptions::deterministic
  ops::KvCacheFormat kv_cache_format = ops::KvCacheFormat::model;  // EngineOptions::kv_cache_format
};

struct Generation {
  std::vector<int32_t> tokens;  // generated ids (without the prompt)
  std::string text;
  std::string finish_reason;  // "stop" (an end-of-sequence token) or "length"
};

class LoadedModel {
 public:
  // path: a directory with config.json, tokenizer.json and safetensors weights, or a .gguf
  // file. Every file is checked (and the tokenizer built) before the weights are loaded.
  // A placement of more than one rank splits the model over them (tensor parallelism).
  LoadedModel(Context& ctx, const std::string& path, DType dtype, const Placement& placement = {});

  const model::ModelConfig& config() const { return runner_->config(); }
  // Where the forward passes run; an Engine over it serves many requests.
  ModelRunner& runner() { return *runner_; }
  const text::Tokenizer& tokenizer() const { return *tokenizer_; }
  bool has_chat_template() const { return chat_.has_value(); }
  const text::ChatTemplate& chat_template() const;
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }

  // The prompt's token ids: the text itself, or with chat, one user message rendered with the
  // model's chat template (and the generation prompt); the message is tokenized as plain text
  // unless allow_special_in_content (text::encode_chat).
  std::vector<int32_t> encode_prompt(const std::string& prompt, bool chat, bool allow_special_in_content = false) const;
  // Generates after `prompt`; on_text (may be empty) receives the text as it is produced.
  Generation generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                      const std::function<void(const std::string&)>& on_text = {});
  // Logits [tokens, vocab] as f32 on the host for every position of `tokens` (a fresh sequence).
  std::vector<float> score(const std::vector<int32_t>& tokens);

 private:
  std::unique_ptr<weights::Checkpoint> checkpoint_;
  std::optional<text::Tokenizer> tokenizer_;
  std::optional<text::ChatTemplate> chat_;
  std::vector<int32_t> eos_ids_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace lw::engine
