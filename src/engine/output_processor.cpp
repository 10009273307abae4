#include "engine/output_processor.h"

#include <algorithm>

namespace lw::engine {

void OutputProcessor::start(Sequence& s) const {
  s.hold = 0;
  for (const std::string& stop : s.req.stop_strings) s.hold = std::max(s.hold, stop.size() - 1);
  if (tokenizer_) s.decoder.emplace(*tokenizer_);
  s.out.id = s.id;
}

void OutputProcessor::finish(Sequence& s, const std::string& reason, bool flush) const {
  if (s.done) return;
  if (flush) {
    // Nothing can complete a stop string any more: the held-back text goes out.
    if (s.decoder) s.pending += s.decoder->finish();
    s.out.text += s.pending;
    s.pending.clear();
  }
  s.done = true;
  s.out.finished = true;
  s.out.finish_reason = reason;
}

void OutputProcessor::append(Sequence& s, int32_t token, float logprob,
                             std::vector<std::pair<int32_t, float>> top) const {
  ++s.generated;
  const bool eos = std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
  const bool stop_id =
      std::find(s.req.stop_token_ids.begin(), s.req.stop_token_ids.end(), token) != s.req.stop_token_ids.end();
  if ((eos && !s.req.ignore_eos) || stop_id) {
    finish(s, "stop");
    return;
  }
  s.tokens.push_back(token);
  s.out.tokens.push_back(token);
  s.out.logprobs.push_back(logprob);
  if (s.req.top_logprobs > 0) s.out.top_logprobs.push_back(std::move(top));
  if (s.decoder && token < tokenizer_->vocab_size()) {
    s.pending += s.decoder->push(token);
    // The earliest stop string in the unsent text ends the request there.
    size_t cut = std::string::npos;
    for (const std::string& stop : s.req.stop_strings) cut = std::min(cut, s.pending.find(stop));
    if (cut != std::string::npos) {
      s.out.text += s.pending.substr(0, cut);
      s.pending.clear();
      finish(s, "stop", false);
      return;
    }
    // Send all but the tail a stop string could still start in, on a character boundary.
    size_t send = s.pending.size() > s.hold ? s.pending.size() - s.hold : 0;
    while (send > 0 && send < s.pending.size() && (static_cast<unsigned char>(s.pending[send]) & 0xC0) == 0x80) --send;
    s.out.text += s.pending.substr(0, send);
    s.pending.erase(0, send);
  }
  if (s.generated >= s.req.max_tokens) finish(s, "length");
}

}  // namespace lw::engine
