// Internal state of lw::text::Tokenizer, shared by tokenizer.cpp and stream_decoder.cpp.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/tokenizer.h"

namespace lw::text::detail {

// A compiled PCRE2 pattern (UTF + UCP, JIT when available).
class Regex {
 public:
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Appends the pieces of `s`: every match and every non-empty gap between matches.
  void split_isolated(std::string_view s, std::vector<std::string_view>& out) const;
  // Replaces every match with `with`.
  std::string replace_all(std::string_view s, std::string_view with) const;

 private:
  void* code_ = nullptr;
};

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false;
  bool normalized = false;  // Hugging Face matches it in the normalized text
  std::string match;        // the text matched: content, or its normalized form
};

using AddedTable = std::array<std::vector<int32_t>, 256>;  // first byte -> indices, longest first

struct NormStep {
  enum Kind { kPrepend, kReplace, kReplaceRegex, kNfc } kind = kPrepend;
  std::string a, b;
  std::shared_ptr<Regex> re;
};

struct PreStage {
  enum Kind { kSplit, kByteLevel, kMetaspace } kind = kSplit;
  std::shared_ptr<Regex> re;       // kSplit; kByteLevel when it splits
  bool add_prefix_space = false;   // kByteLevel
  std::string replacement;         // kMetaspace
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;  // kMetaspace
  bool split = true;               // kMetaspace
};

struct Impl {
  TokenizerKind kind = TokenizerKind::kByteLevelBpe;
  std::vector<std::string> pieces;  // id -> token text
  std::vector<uint8_t> present;     // id has a token
  std::vector<uint8_t> special;
  std::unordered_map<std::string, int32_t> vocab;
  // (left << 32 | right) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  std::vector<float> scores;  // merge priority when there are no merges
  bool byte_fallback = false, ignore_merges = false, fuse_unk = false;
  int32_t unk_id = -1;
  std::array<int32_t, 256> byte_ids{};  // <0xXX> ids, -1 when absent

  std::vector<NormStep> normalizers;
  std::vector<PreStage> pre;
  bool byte_level = false;  // map bytes to the GPT-2 alphabet before BPE

  // Decoder: per token, replacements, then <0xXX> grouping or byte-level mapping, then
  // stripping of leading spaces of the whole text or of the first token.
  bool dec_byte_level = false, dec_byte_fallback = false;
  std::string dec_first_token_drop;  // Metaspace: removed from the first token entirely
  std::vector<std::pair<std::string, std::string>> dec_replace;
  int dec_strip_left = 0;

  int32_t bos_id = -1, eos_id = -1;
  bool add_bos = false;
  std::vector<AddedToken> added;
  AddedTable added_raw;   // matched in the input text
  AddedTable added_norm;  // matched after normalization (their normalized form differs)

  std::string chat_template, bos_token, eos_token;

  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void finalize();  // builds lookup tables once pieces/added are filled
  void bpe(const std::string& word, std::vector<int32_t>& out) const;
  std::string normalize(std::string s) const;
  // special_ok: special tokens of added_norm may match in the segment.
  void encode_segment(std::string_view seg, bool at_start, bool special_ok, std::vector<int32_t>& out) const;
  void encode_piece(const std::string& s, bool at_start, std::vector<int32_t>& out) const;
  // Splits text on the added tokens of `table` (leftmost-longest, honouring lstrip/rstrip):
  // seg(start, end) for the text between tokens, out gets each token's id. A special token
  // matches only where special_ok(begin, end) says so (null: everywhere).
  void split_added(const AddedTable& table, std::string_view text,
                   const std::function<void(size_t, size_t)>& seg, std::vector<int32_t>& out,
                   const std::function<bool(size_t, size_t)>& special_ok = nullptr) const;
};

// UTF-8 helpers.
bool valid_utf8(std::string_view s);
// Length of the UTF-8 character at s[i] (1 for a stray byte).
size_t utf8_len(std::string_view s, size_t i);
// Decodes bytes the way Rust's String::from_utf8_lossy does (U+FFFD per maximal invalid
// subpart). With final_chunk false an incomplete sequence at the end is left in `bytes`.
std::string utf8_lossy_take(std::string& bytes, bool final_chunk);
// GPT-2 byte <-> printable character mapping.
const std::array<std::string, 256>& byte_to_unicode();
// The bytes of a byte-level token; the token's own bytes when a character is outside the map.
std::string byte_level_bytes(std::string_view token);

}  // namespace lw::text::detail

namespace lw::text {
struct Tokenizer::Impl : detail::Impl {};
}  // namespace lw::text
