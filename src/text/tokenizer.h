// Text <-> token ids for the two BPE families LLMs ship with: byte-level BPE (GPT-2, Llama-3,
// Qwen2, SmolLM; GGUF "gpt2") and SentencePiece-style BPE with byte fallback (Llama-2,
// Mistral; GGUF "llama"). Loaded from a Hugging Face tokenizer.json or from GGUF metadata.
// Encode/decode follow the Hugging Face `tokenizers` results; every failure is an lw::Error.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lw::text {

enum class TokenizerKind {
  kByteLevelBpe,     // GGUF tokenizer.ggml.model "gpt2"
  kSentencePieceBpe  // GGUF tokenizer.ggml.model "llama"
};

// The bytes [begin, end) of a text.
struct TextSpan {
  size_t begin = 0, end = 0;
};

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// What the model layer reads from GGUF metadata (tokenizer.ggml.*). Control (3) and
// user-defined (4) tokens are matched whole in the text; control tokens are special.
// "llama" kind: add_space_prefix prepends "▁" to every run of text between such tokens
// (as Hugging Face's converted Llama tokenizers do); with no merges, the pair whose merged
// token has the highest score merges first.
struct TokenizerSpec {
  TokenizerKind kind = TokenizerKind::kByteLevelBpe;
  std::vector<std::string> tokens;
  std::vector<float> scores;         // may be empty; used for merging when `merges` is empty
  std::vector<int32_t> token_types;  // TokenType values; may be empty (all normal)
  std::vector<std::string> merges;   // "left right"
  std::string pre = "default";       // tokenizer.ggml.pre; see Tokenizer::pre_tokenizer_names()
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;  // -1: none
  bool add_bos = false;
  bool add_space_prefix = true;  // SentencePiece only
};

class Tokenizer {
 public:
  // tokenizer_config_json may not exist; when it does it supplies bos/eos token names,
  // add_bos_token and the chat template.
  static Tokenizer from_hf(const std::filesystem::path& tokenizer_json,
                           const std::filesystem::path& tokenizer_config_json = {});
  static Tokenizer from_spec(const TokenizerSpec& spec);
  // The GGUF pre-tokenizer names from_spec accepts.
  static std::vector<std::string> pre_tokenizer_names();

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Added/special tokens written in `text` are matched whole first (leftmost-longest), as
  // Hugging Face does; `text` must be valid UTF-8.
  // add_bos: apply the model's BOS rule (HF add_special_tokens) - prepends bos_id() when the
  // tokenizer asks for it.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  // The same, with the special tokens matched only outside `plain_text` (spans of `text`,
  // sorted and disjoint): text there that spells a special token is split as ordinary text
  // (Hugging Face's split_special_tokens); added tokens that are not special still match. A
  // special token is matched only when none of its bytes lies in a span.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, std::span<const TextSpan> plain_text) const;
  // Throws lw::Error for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;  // -1: none
  int32_t eos_id() const;  // -1: none
  bool adds_bos() const;   // whether encode(..., true) prepends bos_id()
  const std::string& id_to_piece(int32_t id) const;
  int32_t piece_to_id(std::string_view piece) const;  // -1 when absent
  bool is_special(int32_t id) const;
  // From tokenizer_config.json (empty when absent): the chat template and the token texts.
  const std::string& chat_template() const;
  const std::string& bos_token() const;
  const std::string& eos_token() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lw::text
