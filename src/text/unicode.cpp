// UTF-8, the GPT-2 byte alphabet and the PCRE2 wrapper.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <unordered_map>

#include "base/error.h"
#include "text/tokenizer_impl.h"

namespace lw::text::detail {

namespace {

std::string encode_cp(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// Number of bytes of a valid prefix of the sequence at s[i] (the whole sequence when
// complete), and whether it is complete. Follows the Unicode "maximal subpart" rule.
struct SeqCheck {
  size_t len;
  bool complete;
  bool valid_prefix;  // incomplete only because the input ended
};

SeqCheck check_seq(const unsigned char* s, size_t n) {
  unsigned char b0 = s[0];
  if (b0 < 0x80) return {1, true, true};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, false, false};
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (k >= n) return {k, false, true};
    unsigned char c = s[k];
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return {k, false, false};
  }
  return {need + 1, true, true};
}

}  // namespace

bool valid_utf8(std::string_view s) {
  auto p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    SeqCheck c = check_seq(p + i, s.size() - i);
    if (!c.complete) return false;
    i += c.len;
  }
  return true;
}

size_t utf8_len(std::string_view s, size_t i) {
  SeqCheck c = check_seq(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i);
  return c.complete ? c.len : 1;
}

std::string utf8_lossy_take(std::string& bytes, bool final_chunk) {
  std::string out;
  auto p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    SeqCheck c = check_seq(p + i, n - i);
    if (c.complete) {
      out.append(bytes, i, c.len);
    } else if (c.valid_prefix && !final_chunk) {
      break;  // wait for the rest of the character
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += c.len;
  }
  bytes.erase(0, i);
  return out;
}

const std::array<std::string, 256>& byte_to_unicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = encode_cp(printable ? b : next++);
    }
    return t;
  }();
  return table;
}

std::string byte_level_bytes(std::string_view token) {
  static const std::unordered_map<std::string, unsigned char> reverse = [] {
    std::unordered_map<std::string, unsigned char> r;
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) r.emplace(t[b], static_cast<unsigned char>(b));
    return r;
  }();
  std::string out;
  std::string ch;
  for (size_t i = 0; i < token.size();) {
    size_t len = utf8_len(token, i);
    ch.assign(token.substr(i, len));
    auto it = reverse.find(ch);
    if (it == reverse.end()) return std::string(token);
    out += static_cast<char>(it->second);
    i += len;
  }
  return out;
}

Regex::Regex(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    LW_FAIL("bad regex /" << pattern << "/ at offset " << off << ": " << reinterpret_cast<char*>(buf));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

namespace {
struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(md); }
};

// Calls f(start, end) for every non-empty match.
template <class F>
void for_each_match(pcre2_code* code, std::string_view s, F&& f) {
  MatchData m(code);
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t off = 0;
  while (off <= s.size()) {
    int rc = pcre2_match(code, subject, s.size(), off, PCRE2_NO_UTF_CHECK, m.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof(buf));
      LW_FAIL("regex match failed: " << reinterpret_cast<char*>(buf));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
    size_t ms = ov[0], me = ov[1];
    if (me == ms) {  // empty match: step over one character
      if (ms >= s.size()) break;
      off = ms + utf8_len(s, ms);
      continue;
    }
    f(ms, me);
    off = me;
  }
}
}  // namespace

void Regex::split_isolated(std::string_view s, std::vector<std::string_view>& out) const {
  size_t prev = 0;
  for_each_match(static_cast<pcre2_code*>(code_), s, [&](size_t ms, size_t me) {
    if (ms > prev) out.push_back(s.substr(prev, ms - prev));
    out.push_back(s.substr(ms, me - ms));
    prev = me;
  });
  if (prev < s.size()) out.push_back(s.substr(prev));
}

std::string Regex::replace_all(std::string_view s, std::string_view with) const {
  std::string out;
  size_t prev = 0;
  for_each_match(static_cast<pcre2_code*>(code_), s, [&](size_t ms, size_t me) {
    out.append(s.substr(prev, ms - prev));
    out.append(with);
    prev = me;
  });
  out.append(s.substr(prev));
  return out;
}

}  // namespace lw::text::detail
