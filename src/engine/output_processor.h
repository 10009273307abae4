// Turns a sequence's sampled tokens into what its client sees: the end-of-sequence and stop
// ids, the token and its log-probabilities, the text decoded so far (whole UTF-8 characters,
// with the tail a stop string could still start in held back), the earliest stop string
// cutting the text, max_tokens, and the finish reason. It writes Sequence::out; the engine
// delivers it.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/sequence.h"
#include "text/tokenizer.h"

namespace lw::engine {

class OutputProcessor {
 public:
  // tokenizer may be null: then outputs carry no text (and stop strings cannot be matched).
  OutputProcessor(const text::Tokenizer* tokenizer, std::vector<int32_t> eos_ids)
      : tokenizer_(tokenizer), eos_ids_(std::move(eos_ids)) {}

  const text::Tokenizer* tokenizer() const { return tokenizer_; }
  // Readies a new sequence (its request set): the decoder and how much text to hold back.
  void start(Sequence& s) const;
  // One sampled token with its log-probability and the top ones (as many as the request asked
  // for); may finish the sequence ("stop" or "length").
  void append(Sequence& s, int32_t token, float logprob, std::vector<std::pair<int32_t, float>> top) const;
  // Ends the sequence with `reason`. flush: send the text held back for stop strings (not
  // when a stop string ended it). A finished sequence stays as it is.
  void finish(Sequence& s, const std::string& reason, bool flush = true) const;

 private:
  const text::Tokenizer* tokenizer_;
  std::vector<int32_t> eos_ids_;
};

}  // namespace lw::engine
