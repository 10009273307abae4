// Incremental detokenization for generation: text comes out as ids arrive, never half a
// UTF-8 character, and the concatenation of all push() results and finish() equals
// Tokenizer::decode of all ids.
#pragma once
#include <cstdint>
#include <string>

#include "text/tokenizer.h"

namespace lw::text {

class StreamDecoder {
 public:
  // The tokenizer must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);
  std::string push(int32_t id);
  // Flushes what is held back (an incomplete sequence becomes U+FFFD) and resets.
  std::string finish();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  bool first_token_ = true;
  int strip_left_ = 0;
  std::string pending_bytes_;  // byte-level: an incomplete UTF-8 tail
  std::string fallback_group_;  // byte-fallback: the current run of <0xXX> bytes

  std::string emit(std::string text);
  std::string flush_group();
  void reset();
};

}  // namespace lw::text
