#include "text/stream_decoder.h"

#include "base/error.h"
#include "text/tokenizer_impl.h"

namespace lw::text {

namespace {
// The byte of a "<0xXX>" token, or -1.
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}
}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tok_(&tokenizer), skip_special_(skip_special) {
  reset();
}

void StreamDecoder::reset() {
  first_token_ = true;
  strip_left_ = tok_->impl().dec_strip_left;
  pending_bytes_.clear();
  fallback_group_.clear();
}

std::string StreamDecoder::emit(std::string text) {
  size_t cut = 0;
  while (strip_left_ > 0 && cut < text.size() && text[cut] == ' ') {
    ++cut;
    --strip_left_;
  }
  if (cut < text.size()) strip_left_ = 0;
  text.erase(0, cut);
  return text;
}

// A run of <0xXX> tokens is one UTF-8 string when valid, otherwise one U+FFFD per byte.
std::string StreamDecoder::flush_group() {
  if (fallback_group_.empty()) return {};
  std::string out;
  if (detail::valid_utf8(fallback_group_)) {
    out = fallback_group_;
  } else {
    for (size_t i = 0; i < fallback_group_.size(); ++i) out += "\xEF\xBF\xBD";
  }
  fallback_group_.clear();
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  const auto& t = tok_->impl();
  LW_CHECK(id >= 0 && size_t(id) < t.pieces.size() && t.present[id],
           "decode: token id " << id << " is outside the vocabulary (size " << t.pieces.size() << ")");
  if (skip_special_ && t.special[id]) return {};
  std::string tok = t.pieces[id];
  if (first_token_ && !t.dec_first_token_drop.empty()) {
    // Hugging Face's Metaspace decoder drops every replacement character of the first token.
    const std::string& r = t.dec_first_token_drop;
    for (size_t f; (f = tok.find(r)) != std::string::npos;) tok.erase(f, r.size());
  }
  for (const auto& [from, to] : t.dec_replace) {
    if (tok.find(from) == std::string::npos) continue;
    std::string r;
    size_t pos = 0;
    for (size_t f; (f = tok.find(from, pos)) != std::string::npos; pos = f + from.size()) {
      r.append(tok, pos, f - pos);
      r += to;
    }
    r.append(tok, pos, std::string::npos);
    tok = std::move(r);
  }
  first_token_ = false;
  if (t.dec_byte_fallback) {
    int b = fallback_byte(tok);
    if (b >= 0) {
      fallback_group_ += static_cast<char>(b);
      return {};
    }
    return emit(flush_group() + tok);
  }
  if (t.dec_byte_level) {
    pending_bytes_ += detail::byte_level_bytes(tok);
    return emit(detail::utf8_lossy_take(pending_bytes_, false));
  }
  return emit(std::move(tok));
}

std::string StreamDecoder::finish() {
  std::string out = flush_group();
  out += detail::utf8_lossy_take(pending_bytes_, true);
  out = emit(std::move(out));
  reset();
  return out;
}

}  // namespace lw::text
