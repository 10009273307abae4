#include "text/tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "base/error.h"
#include "text/stream_decoder.h"
#include "text/tokenizer_impl.h"

namespace lw::text {

namespace detail {

namespace {

using json = nlohmann::json;

// The pre-tokenizer patterns of the model families (GGUF tokenizer.ggml.pre).
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::shared_ptr<Regex> cached_regex(const std::string& pattern) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::weak_ptr<Regex>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& w = cache[pattern];
  if (auto p = w.lock()) return p;
  auto p = std::make_shared<Regex>(pattern);
  w = p;
  return p;
}

PreStage split_stage(const std::string& pattern) {
  PreStage s;
  s.kind = PreStage::kSplit;
  s.re = cached_regex(pattern);
  return s;
}

PreStage byte_level_stage(bool use_regex, bool add_prefix_space) {
  PreStage s;
  s.kind = PreStage::kByteLevel;
  if (use_regex) s.re = cached_regex(kGpt2Pattern);
  s.add_prefix_space = add_prefix_space;
  return s;
}

std::string byte_token(int b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
  return buf;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (;;) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out.append(to);
    pos = f + from.size();
  }
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

std::string nfc(const std::string& s) {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(st);
  LW_CHECK(U_SUCCESS(st), "ICU NFC normalizer unavailable: " << u_errorName(st));
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  if (n->isNormalized(u, st) && U_SUCCESS(st)) return s;
  st = U_ZERO_ERROR;
  icu::UnicodeString r = n->normalize(u, st);
  LW_CHECK(U_SUCCESS(st), "NFC normalization failed: " << u_errorName(st));
  std::string out;
  r.toUTF8String(out);
  return out;
}

}  // namespace

void Impl::finalize() {
  for (auto& v : added_raw) v.clear();
  for (auto& v : added_norm) v.clear();
  for (auto& a : added) {
    a.match = a.content;
    if (!a.normalized || normalizers.empty()) continue;
    a.match = normalize(a.content);
    if (a.match != a.content) {
      // Hugging Face then also reports (and decodes) the token as its normalized form.
      pieces[a.id] = a.match;
      vocab.emplace(a.match, a.id);
    }
  }
  std::vector<int32_t> order(added.size());
  for (size_t i = 0; i < added.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return added[a].match.size() > added[b].match.size(); });
  for (int32_t i : order) {
    const AddedToken& a = added[i];
    if (a.match.empty()) continue;
    AddedTable& table = a.match != a.content ? added_norm : added_raw;
    table[static_cast<unsigned char>(a.match[0])].push_back(i);
  }
  byte_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(byte_token(b));
    if (it != vocab.end()) byte_ids[b] = it->second;
  }
}

void Impl::bpe(const std::string& word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = vocab.find(word);
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(word);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev, next;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  auto push = [&](int32_t id) {
    int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, -1});
    if (n > 0) syms[n - 1].next = n;
  };
  bool last_unk = false;
  for (size_t i = 0; i < word.size();) {
    size_t len = utf8_len(word, i);
    auto it = vocab.find(word.substr(i, len));
    if (it != vocab.end()) {
      push(it->second);
      last_unk = false;
    } else {
      bool done = false;
      if (byte_fallback) {
        bool all = true;
        for (size_t k = 0; k < len; ++k) all = all && byte_ids[static_cast<unsigned char>(word[i + k])] >= 0;
        if (all) {
          for (size_t k = 0; k < len; ++k) push(byte_ids[static_cast<unsigned char>(word[i + k])]);
          done = true;
          last_unk = false;
        }
      }
      if (!done && unk_id >= 0) {
        if (!(fuse_unk && last_unk)) push(unk_id);
        last_unk = true;
      }
    }
    i += len;
  }

  // Priority-queue merging: lowest rank first, leftmost on ties; stale entries are skipped.
  struct Cand {
    float prio;
    int32_t left;
    int32_t left_id, right_id, new_id;
    bool operator>(const Cand& o) const { return prio != o.prio ? prio > o.prio : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto consider = [&](int32_t l) {
    if (l < 0) return;
    int32_t r = syms[l].next;
    if (r < 0) return;
    int32_t a = syms[l].id, b = syms[r].id;
    if (!merges.empty()) {
      auto it = merges.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
      if (it != merges.end()) q.push({float(it->second.first), l, a, b, it->second.second});
    } else if (!scores.empty()) {
      auto it = vocab.find(pieces[a] + pieces[b]);
      if (it != vocab.end() && size_t(it->second) < scores.size())
        q.push({-scores[it->second], l, a, b, it->second});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);
  while (!q.empty()) {
    Cand c = q.top();
    q.pop();
    Sym& L = syms[c.left];
    if (L.id != c.left_id || L.next < 0) continue;
    Sym& R = syms[L.next];
    if (R.id != c.right_id) continue;
    L.id = c.new_id;
    R.id = -2;  // dead
    L.next = R.next;
    if (R.next >= 0) syms[R.next].prev = c.left;
    consider(L.prev);
    consider(c.left);
  }
  std::vector<int32_t> ids;
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) ids.push_back(syms[i].id);
  out.insert(out.end(), ids.begin(), ids.end());
  if (word.size() > 256) return;  // long runs (SentencePiece lines) are rarely repeated
  std::lock_guard<std::mutex> lock(cache_mu);
  if (cache.size() > 200000) cache.clear();
  cache.emplace(word, std::move(ids));
}

std::string Impl::normalize(std::string s) const {
  for (const auto& n : normalizers) {
    switch (n.kind) {
      case NormStep::kPrepend:
        if (!s.empty()) s = n.a + s;
        break;
      case NormStep::kReplace:
        replace_all(s, n.a, n.b);
        break;
      case NormStep::kReplaceRegex:
        s = n.re->replace_all(s, n.b);
        break;
      case NormStep::kNfc:
        s = nfc(s);
        break;
    }
  }
  return s;
}

void Impl::encode_segment(std::string_view seg, bool at_start, bool special_ok, std::vector<int32_t>& out) const {
  std::string s = normalize(std::string(seg));
  if (s.empty()) return;
  bool any_norm = false;
  for (const auto& v : added_norm) any_norm = any_norm || !v.empty();
  if (!any_norm) {
    encode_piece(s, at_start, out);
    return;
  }
  split_added(
      added_norm, s, [&](size_t a, size_t b) { encode_piece(s.substr(a, b - a), at_start && a == 0, out); }, out,
      special_ok ? std::function<bool(size_t, size_t)>() : [](size_t, size_t) { return false; });
}

void Impl::encode_piece(const std::string& s, bool at_start, std::vector<int32_t>& out) const {
  // Pieces are owned strings because prefixing stages change them.
  std::vector<std::string> pieces_now{s};
  std::vector<std::string_view> views;
  for (const auto& st : pre) {
    std::vector<std::string> next;
    bool first_piece = true;
    for (auto& p : pieces_now) {
      if (st.kind == PreStage::kByteLevel && st.add_prefix_space && !p.empty() && p[0] != ' ') p = " " + p;
      if (st.kind == PreStage::kMetaspace) {
        replace_all(p, " ", st.replacement);
        bool prepend = st.prepend == PreStage::kAlways || (st.prepend == PreStage::kFirst && at_start && first_piece);
        if (prepend && p.compare(0, st.replacement.size(), st.replacement) != 0) p = st.replacement + p;
        first_piece = false;
        if (!st.split) {
          next.push_back(std::move(p));
          continue;
        }
        size_t start = 0;
        for (size_t f = p.find(st.replacement, 1); f != std::string::npos; f = p.find(st.replacement, f + 1)) {
          if (f > start) next.push_back(p.substr(start, f - start));
          start = f;
        }
        if (start < p.size()) next.push_back(p.substr(start));
        continue;
      }
      first_piece = false;
      if (!st.re) {
        next.push_back(std::move(p));
        continue;
      }
      views.clear();
      st.re->split_isolated(p, views);
      for (auto v : views) next.emplace_back(v);
    }
    pieces_now = std::move(next);
  }
  const auto& b2u = byte_to_unicode();
  std::string mapped;
  for (const auto& p : pieces_now) {
    if (p.empty()) continue;
    if (byte_level) {
      mapped.clear();
      for (unsigned char c : p) mapped += b2u[c];
      bpe(mapped, out);
    } else {
      bpe(p, out);
    }
  }
}

}  // namespace detail

using detail::AddedToken;
using detail::NormStep;
using detail::PreStage;
using json = nlohmann::json;

namespace {

// Errors while reading tokenizer.json name the file and the field.
struct Ctx {
  std::string file;
  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    LW_FAIL(file << ": " << field << ": " << msg);
  }
};

std::string type_of(const json& j, const std::string& field, const Ctx& ctx) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) ctx.fail(field, "missing \"type\"");
  return j["type"].get<std::string>();
}

std::string jstr(const json& j, const char* key, const std::string& def = "") {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return def;
  return j[key].is_string() ? j[key].get<std::string>() : def;
}
bool jbool(const json& j, const char* key, bool def) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_boolean()) return def;
  return j[key].get<bool>();
}

json read_json(const std::filesystem::path& p, const char* what) {
  std::ifstream in(p, std::ios::binary);
  LW_CHECK(in, "cannot open " << what << " '" << p.string() << "'");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::parse_error& e) {
    LW_FAIL("malformed JSON in " << what << " '" << p.string() << "': " << e.what());
  }
}

void add_normalizer(detail::Impl& t, const json& n, const std::string& field, const Ctx& ctx) {
  if (n.is_null()) return;
  std::string type = type_of(n, field, ctx);
  if (type == "Sequence") {
    const json& list = n.value("normalizers", json::array());
    for (size_t i = 0; i < list.size(); ++i) add_normalizer(t, list[i], field + ".normalizers[" + std::to_string(i) + "]", ctx);
  } else if (type == "Prepend") {
    t.normalizers.push_back({NormStep::kPrepend, jstr(n, "prepend"), "", {}});
  } else if (type == "Replace") {
    const json& pat = n.value("pattern", json::object());
    if (pat.contains("String")) {
      t.normalizers.push_back({NormStep::kReplace, pat["String"].get<std::string>(), jstr(n, "content"), {}});
    } else if (pat.contains("Regex")) {
      NormStep s{NormStep::kReplaceRegex, "", jstr(n, "content"), {}};
      s.re = detail::cached_regex(pat["Regex"].get<std::string>());
      t.normalizers.push_back(std::move(s));
    } else {
      ctx.fail(field + ".pattern", "expected String or Regex");
    }
  } else if (type == "NFC") {
    t.normalizers.push_back({NormStep::kNfc, "", "", {}});
  } else {
    ctx.fail(field, "unsupported normalizer type '" + type + "' (supported: Sequence, Prepend, Replace, NFC)");
  }
}

void add_pre(detail::Impl& t, const json& p, const std::string& field, const Ctx& ctx) {
  if (p.is_null()) return;
  std::string type = type_of(p, field, ctx);
  if (!t.pre.empty() && t.pre.back().kind == PreStage::kByteLevel)
    ctx.fail(field, "a pre-tokenizer after ByteLevel is not supported");
  if (type == "Sequence") {
    const json& list = p.value("pretokenizers", json::array());
    for (size_t i = 0; i < list.size(); ++i) add_pre(t, list[i], field + ".pretokenizers[" + std::to_string(i) + "]", ctx);
  } else if (type == "Split") {
    std::string behavior = jstr(p, "behavior", "Isolated");
    if (behavior != "Isolated") ctx.fail(field + ".behavior", "unsupported Split behavior '" + behavior + "' (supported: Isolated)");
    if (jbool(p, "invert", false)) ctx.fail(field + ".invert", "inverted Split is not supported");
    const json& pat = p.value("pattern", json::object());
    std::string re;
    if (pat.contains("Regex")) {
      re = pat["Regex"].get<std::string>();
    } else if (pat.contains("String")) {
      // A literal string: quote it for PCRE2.
      re = "\\Q" + pat["String"].get<std::string>() + "\\E";
    } else {
      ctx.fail(field + ".pattern", "expected Regex or String");
    }
    t.pre.push_back(detail::split_stage(re));
  } else if (type == "ByteLevel") {
    t.pre.push_back(detail::byte_level_stage(jbool(p, "use_regex", true), jbool(p, "add_prefix_space", false)));
    t.byte_level = true;
  } else if (type == "Digits") {
    t.pre.push_back(detail::split_stage(jbool(p, "individual_digits", false) ? "\\p{N}" : "\\p{N}+"));
  } else if (type == "Metaspace") {
    PreStage s;
    s.kind = PreStage::kMetaspace;
    s.replacement = jstr(p, "replacement", "\xE2\x96\x81");
    std::string scheme = jstr(p, "prepend_scheme", jbool(p, "add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") s.prepend = PreStage::kAlways;
    else if (scheme == "first") s.prepend = PreStage::kFirst;
    else if (scheme == "never") s.prepend = PreStage::kNever;
    else ctx.fail(field + ".prepend_scheme", "unknown value '" + scheme + "'");
    s.split = jbool(p, "split", true);
    t.pre.push_back(std::move(s));
  } else {
    ctx.fail(field, "unsupported pre_tokenizer type '" + type + "' (supported: Sequence, Split, ByteLevel, Digits, Metaspace)");
  }
}

void add_decoder(detail::Impl& t, const json& d, const std::string& field, const Ctx& ctx) {
  if (d.is_null()) return;
  std::string type = type_of(d, field, ctx);
  if (type != "Sequence" && t.dec_strip_left > 0) ctx.fail(field, "a decoder after Strip is not supported");
  if (type == "Sequence") {
    const json& list = d.value("decoders", json::array());
    for (size_t i = 0; i < list.size(); ++i) add_decoder(t, list[i], field + ".decoders[" + std::to_string(i) + "]", ctx);
  } else if (type == "ByteLevel") {
    t.dec_byte_level = true;
  } else if (type == "Replace") {
    const json& pat = d.value("pattern", json::object());
    if (!pat.contains("String")) ctx.fail(field + ".pattern", "only String patterns are supported");
    if (t.dec_byte_fallback || t.dec_byte_level) ctx.fail(field, "Replace after ByteFallback/ByteLevel is not supported");
    t.dec_replace.emplace_back(pat["String"].get<std::string>(), jstr(d, "content"));
  } else if (type == "ByteFallback") {
    t.dec_byte_fallback = true;
  } else if (type == "Fuse") {
    // Concatenation is what the decoder does anyway.
  } else if (type == "Strip") {
    if (jstr(d, "content") != " ") ctx.fail(field + ".content", "only ' ' is supported");
    if (d.value("stop", 0) != 0) ctx.fail(field + ".stop", "stripping at the end is not supported");
    t.dec_strip_left = d.value("start", 0);
  } else if (type == "Metaspace") {
    std::string repl = jstr(d, "replacement", "\xE2\x96\x81");
    t.dec_replace.emplace_back(repl, " ");
    std::string scheme = jstr(d, "prepend_scheme", jbool(d, "add_prefix_space", true) ? "always" : "never");
    if (scheme != "never") t.dec_first_token_drop = repl;
  } else {
    ctx.fail(field, "unsupported decoder type '" + type + "' (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)");
  }
  if (t.dec_byte_level && t.dec_byte_fallback) ctx.fail(field, "ByteLevel together with ByteFallback is not supported");
}

void add_post(detail::Impl& t, const json& p, const std::string& field, const Ctx& ctx) {
  if (p.is_null()) return;
  std::string type = type_of(p, field, ctx);
  if (type == "Sequence") {
    const json& list = p.value("processors", json::array());
    for (size_t i = 0; i < list.size(); ++i) add_post(t, list[i], field + ".processors[" + std::to_string(i) + "]", ctx);
  } else if (type == "ByteLevel") {
    // Offsets only.
  } else if (type == "TemplateProcessing") {
    const json& single = p.value("single", json::array());
    bool seen_seq = false;
    for (const auto& item : single) {
      if (item.contains("Sequence")) {
        seen_seq = true;
      } else if (item.contains("SpecialToken")) {
        std::string name = item["SpecialToken"].value("id", "");
        if (seen_seq) ctx.fail(field + ".single", "special tokens after the sequence are not supported");
        auto it = t.vocab.find(name);
        if (it == t.vocab.end()) ctx.fail(field + ".single", "special token '" + name + "' is not in the vocabulary");
        if (t.add_bos) ctx.fail(field + ".single", "more than one leading special token is not supported");
        t.add_bos = true;
        t.bos_id = it->second;
      }
    }
  } else {
    ctx.fail(field, "unsupported post_processor type '" + type + "' (supported: TemplateProcessing, ByteLevel, Sequence)");
  }
}

void set_piece(detail::Impl& t, int32_t id, const std::string& s) {
  if (id < 0) LW_FAIL("negative token id for '" << s << "'");
  if (size_t(id) >= t.pieces.size()) {
    t.pieces.resize(id + 1);
    t.present.resize(id + 1, 0);
    t.special.resize(id + 1, 0);
  }
  t.pieces[id] = s;
  t.present[id] = 1;
  t.vocab[s] = id;
}

void add_merge(detail::Impl& t, const std::string& a, const std::string& b, int32_t rank, const std::string& where) {
  auto ia = t.vocab.find(a), ib = t.vocab.find(b), ic = t.vocab.find(a + b);
  LW_CHECK(ia != t.vocab.end() && ib != t.vocab.end() && ic != t.vocab.end(),
           where << ": merge " << rank << " ('" << a << "' '" << b << "') uses a token outside the vocabulary");
  t.merges.emplace((uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second), std::make_pair(rank, ic->second));
}

// Byte length of the Unicode White_Space character at s[i] (0 if none); added tokens
// lstrip/rstrip absorb these, as Rust's char::is_whitespace does.
size_t space_at(std::string_view s, size_t i) {
  static const char* const kSpaces[] = {"\u0085", "\u00A0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003",
                                        "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200A",
                                        "\u2028", "\u2029", "\u202F", "\u205F", "\u3000"};
  unsigned char c = s[i];
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return 1;
  for (const char* w : kSpaces) {
    std::string_view v(w);
    if (s.compare(i, v.size(), v) == 0) return v.size();
  }
  return 0;
}

// Byte length of the whitespace character that ends at s[end] (0 if none).
size_t space_before(std::string_view s, size_t end) {
  for (size_t len = 1; len <= 3 && len <= end; ++len)
    if (space_at(s, end - len) == len) return len;
  return 0;
}

std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_hf(const std::filesystem::path& tokenizer_json, const std::filesystem::path& tokenizer_config_json) {
  json j = read_json(tokenizer_json, "tokenizer.json");
  Ctx ctx{tokenizer_json.string()};
  auto t = std::make_unique<Impl>();
  if (!j.is_object() || !j.contains("model")) ctx.fail("model", "missing");
  const json& m = j["model"];
  std::string mtype = m.is_object() ? jstr(m, "type", m.contains("merges") ? "BPE" : "") : "";
  if (mtype != "BPE") ctx.fail("model.type", "unsupported model type '" + mtype + "' (supported: BPE)");
  if (!m.contains("vocab") || !m["vocab"].is_object()) ctx.fail("model.vocab", "missing or not an object");
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer()) ctx.fail("model.vocab", "id of '" + it.key() + "' is not an integer");
    set_piece(*t, it.value().get<int32_t>(), it.key());
  }
  if (!jstr(m, "continuing_subword_prefix").empty()) ctx.fail("model.continuing_subword_prefix", "not supported");
  if (!jstr(m, "end_of_word_suffix").empty()) ctx.fail("model.end_of_word_suffix", "not supported");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    ctx.fail("model.dropout", "BPE dropout is not supported");
  t->byte_fallback = jbool(m, "byte_fallback", false);
  t->ignore_merges = jbool(m, "ignore_merges", false);
  t->fuse_unk = jbool(m, "fuse_unk", false);

  // Added tokens may extend the vocabulary.
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& a : j["added_tokens"]) {
      AddedToken at;
      at.content = a.value("content", "");
      at.id = a.value("id", -1);
      at.special = a.value("special", false);
      at.lstrip = a.value("lstrip", false);
      at.rstrip = a.value("rstrip", false);
      at.normalized = a.value("normalized", !at.special);
      if (at.id < 0 || at.content.empty()) ctx.fail("added_tokens", "entry without id or content");
      set_piece(*t, at.id, at.content);
      t->special[at.id] = at.special;
      t->added.push_back(std::move(at));
    }
  }
  std::string unk = jstr(m, "unk_token");
  if (!unk.empty()) {
    auto it = t->vocab.find(unk);
    if (it == t->vocab.end()) ctx.fail("model.unk_token", "'" + unk + "' is not in the vocabulary");
    t->unk_id = it->second;
  }
  if (m.contains("merges") && m["merges"].is_array()) {
    const json& ms = m["merges"];
    t->merges.reserve(ms.size());
    for (size_t r = 0; r < ms.size(); ++r) {
      const json& e = ms[r];
      if (e.is_string()) {
        const std::string& s = e.get_ref<const std::string&>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          ctx.fail("model.merges[" + std::to_string(r) + "]", "expected \"left right\", got '" + s + "'");
        add_merge(*t, s.substr(0, sp), s.substr(sp + 1), int32_t(r), ctx.file);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        add_merge(*t, e[0].get<std::string>(), e[1].get<std::string>(), int32_t(r), ctx.file);
      } else {
        ctx.fail("model.merges[" + std::to_string(r) + "]", "expected a string or a pair of strings");
      }
    }
  }
  add_normalizer(*t, j.value("normalizer", json()), "normalizer", ctx);
  add_pre(*t, j.value("pre_tokenizer", json()), "pre_tokenizer", ctx);
  add_decoder(*t, j.value("decoder", json()), "decoder", ctx);
  add_post(*t, j.value("post_processor", json()), "post_processor", ctx);
  t->kind = t->byte_level || t->dec_byte_level ? TokenizerKind::kByteLevelBpe : TokenizerKind::kSentencePieceBpe;

  if (!tokenizer_config_json.empty() && std::filesystem::exists(tokenizer_config_json)) {
    json c = read_json(tokenizer_config_json, "tokenizer_config.json");
    Ctx cctx{tokenizer_config_json.string()};
    t->bos_token = c.contains("bos_token") ? token_text(c["bos_token"]) : "";
    t->eos_token = c.contains("eos_token") ? token_text(c["eos_token"]) : "";
    if (!t->bos_token.empty()) {
      auto it = t->vocab.find(t->bos_token);
      if (it == t->vocab.end()) cctx.fail("bos_token", "'" + t->bos_token + "' is not in the vocabulary");
      t->bos_id = it->second;
    }
    if (!t->eos_token.empty()) {
      auto it = t->vocab.find(t->eos_token);
      if (it == t->vocab.end()) cctx.fail("eos_token", "'" + t->eos_token + "' is not in the vocabulary");
      t->eos_id = it->second;
    }
    if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean()) t->add_bos = c["add_bos_token"].get<bool>();
    if (c.contains("chat_template")) {
      const json& ct = c["chat_template"];
      if (ct.is_string()) {
        t->chat_template = ct.get<std::string>();
      } else if (ct.is_array()) {
        for (const auto& e : ct)
          if (e.value("name", "") == "default") t->chat_template = e.value("template", "");
      }
    }
  }
  if (t->bos_token.empty() && t->bos_id >= 0) t->bos_token = t->pieces[t->bos_id];
  t->finalize();
  return Tokenizer(std::move(t));
}

std::vector<std::string> Tokenizer::pre_tokenizer_names() {
  return {"default", "gpt2", "llama-bpe", "llama3", "qwen2", "smollm", "starcoder"};
}

Tokenizer Tokenizer::from_spec(const TokenizerSpec& spec) {
  auto t = std::make_unique<Impl>();
  t->kind = spec.kind;
  LW_CHECK(!spec.tokens.empty(), "TokenizerSpec has no tokens");
  LW_CHECK(spec.token_types.empty() || spec.token_types.size() == spec.tokens.size(),
           "TokenizerSpec: " << spec.token_types.size() << " token types for " << spec.tokens.size() << " tokens");
  LW_CHECK(spec.scores.empty() || spec.scores.size() == spec.tokens.size(),
           "TokenizerSpec: " << spec.scores.size() << " scores for " << spec.tokens.size() << " tokens");
  t->pieces.reserve(spec.tokens.size());
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    int32_t type = spec.token_types.empty() ? 1 : spec.token_types[i];
    set_piece(*t, int32_t(i), spec.tokens[i]);
    if (type == int32_t(TokenType::kControl) || type == int32_t(TokenType::kUserDefined)) {
      AddedToken at{spec.tokens[i], int32_t(i), type == int32_t(TokenType::kControl), false, false};
      t->special[i] = at.special;
      t->added.push_back(std::move(at));
    }
  }
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string& s = spec.merges[r];
    size_t sp = s.find(' ', 1);  // a merge's left side may itself start with a space
    LW_CHECK(sp != std::string::npos, "TokenizerSpec merge " << r << " '" << s << "' is not \"left right\"");
    add_merge(*t, s.substr(0, sp), s.substr(sp + 1), int32_t(r), "TokenizerSpec");
  }
  t->scores = spec.scores;
  auto check_id = [&](int32_t id, const char* what) {
    LW_CHECK(id >= -1 && id < int32_t(spec.tokens.size()), "TokenizerSpec " << what << " " << id << " out of range");
  };
  check_id(spec.bos_id, "bos_id");
  check_id(spec.eos_id, "eos_id");
  check_id(spec.unk_id, "unk_id");
  check_id(spec.pad_id, "pad_id");
  t->bos_id = spec.bos_id;
  t->eos_id = spec.eos_id;
  t->add_bos = spec.add_bos && spec.bos_id >= 0;
  if (spec.kind == TokenizerKind::kByteLevelBpe) {
    const std::string& p = spec.pre;
    if (p == "default" || p == "gpt2") {
      t->pre.push_back(detail::byte_level_stage(true, false));
    } else if (p == "llama-bpe" || p == "llama3") {
      t->pre.push_back(detail::split_stage(detail::kLlama3Pattern));
      t->pre.push_back(detail::byte_level_stage(false, false));
      t->ignore_merges = true;
    } else if (p == "qwen2") {
      t->pre.push_back(detail::split_stage(detail::kQwen2Pattern));
      t->pre.push_back(detail::byte_level_stage(false, false));
    } else if (p == "smollm" || p == "starcoder") {
      t->pre.push_back(detail::split_stage("\\p{N}"));
      t->pre.push_back(detail::byte_level_stage(true, false));
    } else {
      std::string names;
      for (const auto& n : pre_tokenizer_names()) names += (names.empty() ? "" : ", ") + n;
      LW_FAIL("unknown pre-tokenizer '" << p << "' (tokenizer.ggml.pre); accepted: " << names);
    }
    t->byte_level = true;
    t->dec_byte_level = true;
  } else {
    t->unk_id = spec.unk_id;
    if (spec.add_space_prefix) t->normalizers.push_back({NormStep::kPrepend, "\xE2\x96\x81", "", {}});
    t->normalizers.push_back({NormStep::kReplace, " ", "\xE2\x96\x81", {}});
    t->byte_fallback = true;
    t->dec_replace.emplace_back("\xE2\x96\x81", " ");
    t->dec_byte_fallback = true;
    t->dec_strip_left = spec.add_space_prefix ? 1 : 0;
  }
  if (t->bos_id >= 0) t->bos_token = t->pieces[t->bos_id];
  if (t->eos_id >= 0) t->eos_token = t->pieces[t->eos_id];
  t->finalize();
  return Tokenizer(std::move(t));
}

namespace detail {

void Impl::split_added(const AddedTable& table, std::string_view text,
                       const std::function<void(size_t, size_t)>& seg, std::vector<int32_t>& out,
                       const std::function<bool(size_t, size_t)>& special_ok) const {
  size_t seg_start = 0, i = 0;
  auto flush = [&](size_t end) {
    if (end > seg_start) seg(seg_start, end);
  };
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (int32_t k : table[static_cast<unsigned char>(text[i])]) {
      const auto& a = added[k];
      if (text.compare(i, a.match.size(), a.match) == 0 && (!a.special || !special_ok || special_ok(i, i + a.match.size()))) {
        hit = &a;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t end = i;
    if (hit->lstrip)
      while (end > seg_start) {
        size_t w = space_before(text, end);
        if (w == 0) break;
        end -= w;
      }
    flush(end);
    out.push_back(hit->id);
    i += hit->match.size();
    if (hit->rstrip)
      while (i < text.size()) {
        size_t w = space_at(text, i);
        if (w == 0) break;
        i += w;
      }
    seg_start = i;
  }
  flush(text.size());
}

}  // namespace detail

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  const Impl& t = *impl_;
  LW_CHECK(detail::valid_utf8(text), "encode: input is not valid UTF-8");
  std::vector<int32_t> out;
  if (add_bos && t.add_bos && t.bos_id >= 0) out.push_back(t.bos_id);
  t.split_added(t.added_raw, text,
                [&](size_t a, size_t b) { t.encode_segment(text.substr(a, b - a), a == 0, true, out); }, out);
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, std::span<const TextSpan> plain_text) const {
  const Impl& t = *impl_;
  LW_CHECK(detail::valid_utf8(text), "encode: input is not valid UTF-8");
  for (size_t k = 0; k < plain_text.size(); ++k)
    LW_CHECK(plain_text[k].begin <= plain_text[k].end && plain_text[k].end <= text.size() &&
                 (k == 0 || plain_text[k - 1].end <= plain_text[k].begin),
             "encode: plain-text span " << k << " [" << plain_text[k].begin << ", " << plain_text[k].end
                                        << ") is out of order or outside the text of " << text.size() << " bytes");
  // Whether [begin, end) meets a span; begin only grows from call to call, so the first span
  // that ends after it moves forward only.
  size_t first = 0;
  auto outside = [&](size_t begin, size_t end) {
    while (first < plain_text.size() && plain_text[first].end <= begin) ++first;
    for (size_t k = first; k < plain_text.size() && plain_text[k].begin < end; ++k)
      if (plain_text[k].end > plain_text[k].begin) return false;
    return true;
  };
  std::vector<int32_t> out;
  if (add_bos && t.add_bos && t.bos_id >= 0) out.push_back(t.bos_id);
  size_t k = 0;  // the first span that ends after the current segment's start (segments come in order)
  t.split_added(
      t.added_raw, text,
      [&](size_t a, size_t b) {
        // The normalized text cannot be mapped back to spans: a segment holding plain text
        // matches no special token there.
        while (k < plain_text.size() && plain_text[k].end <= a) ++k;
        const bool special_ok = k == plain_text.size() || plain_text[k].begin >= b;
        t.encode_segment(text.substr(a, b - a), a == 0, special_ok, out);
      },
      out, outside);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  StreamDecoder d(*this, skip_special);
  std::string out;
  for (int32_t id : ids) out += d.push(id);
  out += d.finish();
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->pieces.size()); }
int32_t Tokenizer::bos_id() const { return impl_->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->eos_id; }
bool Tokenizer::adds_bos() const { return impl_->add_bos && impl_->bos_id >= 0; }

const std::string& Tokenizer::id_to_piece(int32_t id) const {
  LW_CHECK(id >= 0 && id < vocab_size() && impl_->present[id], "token id " << id << " is outside the vocabulary (size " << vocab_size() << ")");
  return impl_->pieces[id];
}

int32_t Tokenizer::piece_to_id(std::string_view piece) const {
  auto it = impl_->vocab.find(std::string(piece));
  return it == impl_->vocab.end() ? -1 : it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id];
}

const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
const std::string& Tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& Tokenizer::eos_token() const { return impl_->eos_token; }

}  // namespace lw::text
