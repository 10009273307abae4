// libFuzzer harness over what `lightwave serve` does with a request body before the engine sees
// it: parse_body (JSON, nesting bound), parse_request (every field, the prompt's tokens) and,
// for chat, the chat templates of tests/text/data rendered over the messages and tokenized.
//
// Input: one selector byte, then the body. Selector bits: 0 chat (else completions), 1-3 the
// template, 4 the SentencePiece tokenizer (else byte-level BPE), 5 allow_special_in_content.
//
// Besides crashes (AddressSanitizer, UBSan, uncaught exceptions) it aborts when a parsed request
// breaks what the server relies on: an error that is not a 4xx ApiError; a prompt that is empty,
// outside the vocabulary or past the context with its max_tokens; options out of their ranges;
// message spans out of order; with byte-level BPE, tokens whose bytes do not spell the rendered
// text, or a special token read inside a message's text.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "server/openai_api.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/tokenizer_impl.h"

namespace {

using lw::server::ApiError;
using lw::server::ApiModel;
using lw::server::ParsedRequest;
using lw::text::ChatMessage;
using lw::text::ChatTemplate;
using lw::text::TextSpan;
using lw::text::Tokenizer;
using lw::text::TokenizerKind;
using lw::text::TokenizerSpec;

constexpr int64_t kContext = 4096;

// The control tokens of the templates under test: special in both tokenizers.
const char* const kControls[] = {"<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>",
                                 "<|start_header_id|>", "<|end_header_id|>", "<s>", "</s>", "[INST]", "[/INST]",
                                 "<BOS>", "<EOS>"};

[[noreturn]] void fail(const std::string& what, const std::string& body) {
  std::fprintf(stderr, "fuzz_request: %s\nbody: %s\n", what.c_str(), body.substr(0, 2000).c_str());
  std::abort();
}

std::string cp_utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's byte alphabet, the control tokens and a few merges of common pieces.
Tokenizer byte_level() {
  TokenizerSpec s;
  s.kind = TokenizerKind::kByteLevelBpe;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    s.tokens.push_back(cp_utf8(printable ? b : next++));
  }
  s.token_types.assign(s.tokens.size(), 1);
  for (const char* c : kControls) {
    s.tokens.push_back(c);
    s.token_types.push_back(3);
  }
  s.tokens.push_back("<tool>");  // an added token that is not special
  s.token_types.push_back(4);
  const std::string space = s.tokens[' '];
  for (const auto& [l, r] : std::vector<std::pair<std::string, std::string>>{
           {"u", "s"}, {"e", "r"}, {"us", "er"}, {"a", "s"}, {space, "a"}, {"<", "|"}, {"|", ">"}, {"i", "m"}}) {
    s.merges.push_back(l + " " + r);
    s.tokens.push_back(l + r);
    s.token_types.push_back(1);
  }
  s.pre = "qwen2";
  return Tokenizer::from_spec(s);
}

// SentencePiece-style: byte fallback, the control tokens, a few words.
Tokenizer sentencepiece() {
  TokenizerSpec s;
  s.kind = TokenizerKind::kSentencePieceBpe;
  s.tokens = {"<unk>"};
  s.token_types = {2};
  for (const char* c : kControls) {
    s.tokens.push_back(c);
    s.token_types.push_back(3);
  }
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    s.tokens.push_back(buf);
    s.token_types.push_back(6);
  }
  for (const char* t : {"\xE2\x96\x81", "a", "e", "s", "u", "r", "\xE2\x96\x81u", "\xE2\x96\x81us", "er"}) {
    s.tokens.push_back(t);
    s.token_types.push_back(1);
  }
  s.merges = {"\xE2\x96\x81 u", "\xE2\x96\x81u s", "e r"};
  s.unk_id = 0;
  s.bos_id = 7;  // <s>
  s.eos_id = 8;  // </s>
  s.add_bos = true;
  return Tokenizer::from_spec(s);
}

struct Fixture {
  Tokenizer tokenizers[2] = {byte_level(), sentencepiece()};
  std::vector<std::unique_ptr<ChatTemplate>> templates;
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Fixture& fixture() {
  static const Fixture* f = [] {
    auto* x = new Fixture;
    const std::filesystem::path dir = LW_FUZZ_TEMPLATES;
    // Name, BOS and EOS as tests/text/data/templates.json gives them.
    const char* const names[][3] = {{"smollm2", "<|im_start|>", "<|im_end|>"}, {"qwen25", "", "<|im_end|>"},
                                    {"llama3", "<|begin_of_text|>", "<|eot_id|>"},
                                    {"llama31", "<|begin_of_text|>", "<|eot_id|>"}, {"mistral_v01", "<s>", "</s>"},
                                    {"mistral_v03", "<s>", "</s>"}, {"features", "<BOS>", "<EOS>"}};
    for (const auto& n : names) {
      const std::string source = read_file(dir / (std::string(n[0]) + ".jinja"));
      if (source.empty()) {
        std::fprintf(stderr, "fuzz_request: no template %s in %s\n", n[0], dir.c_str());
        std::abort();
      }
      x->templates.push_back(std::make_unique<ChatTemplate>(source, n[1], n[2]));
    }
    return x;
  }();
  return *f;
}

void check_parsed(const ParsedRequest& r, const Tokenizer& tok, const std::string& body) {
  if (r.prompt.empty()) fail("empty prompt accepted", body);
  for (int32_t id : r.prompt)
    if (id < 0 || id >= tok.vocab_size()) fail("prompt token " + std::to_string(id) + " outside the vocabulary", body);
  if (r.max_tokens < 1 || static_cast<int64_t>(r.prompt.size()) + r.max_tokens > kContext)
    fail("prompt " + std::to_string(r.prompt.size()) + " + max_tokens " + std::to_string(r.max_tokens) + " past the context", body);
  if (r.n < 1 || r.n > 16) fail("n " + std::to_string(r.n), body);
  if (r.top_logprobs < 0 || r.top_logprobs > 20) fail("top_logprobs " + std::to_string(r.top_logprobs), body);
  const auto& s = r.sampling;
  auto in = [](float x, float lo, float hi) { return std::isfinite(x) && x >= lo && x <= hi; };
  if (!in(s.temperature, 0, 2) || !in(s.top_p, 0, 1) || s.top_p <= 0 || !in(s.min_p, 0, 1) || s.top_k < 0 ||
      !in(s.presence_penalty, -2, 2) || !in(s.frequency_penalty, -2, 2) || !in(s.repetition_penalty, 0.01f, 10))
    fail("a sampling option out of its range", body);
  std::set<int32_t> ids;
  for (const auto& [id, bias] : s.logit_bias)
    if (id < 0 || id >= tok.vocab_size() || !in(bias, -100, 100) || !ids.insert(id).second)
      fail("a bad logit_bias entry", body);
  for (const std::string& stop : r.stop_strings)
    if (stop.empty()) fail("an empty stop string", body);
}

// The chat prompt again, from the messages of the body, with the checks of the spans and tokens.
void check_chat(const nlohmann::json& j, const ChatTemplate& tmpl, const Tokenizer& tok, bool byte_level_bpe,
                bool allow_special, const ParsedRequest& r, const std::string& body) {
  std::vector<ChatMessage> msgs;
  for (const auto& m : j["messages"]) {
    const auto& c = m["content"];
    std::string text;
    if (c.is_string()) text = c.get<std::string>();
    else for (const auto& part : c) text += part["text"].get<std::string>();
    const std::string role = m["role"].get<std::string>();
    msgs.push_back({role == "developer" ? "system" : role, text});
  }
  const ChatTemplate::Rendered out = tmpl.render_marked(msgs, true);
  size_t last = 0;
  for (const TextSpan& s : out.message_text) {
    if (s.begin < last || s.end <= s.begin || s.end > out.text.size()) fail("message spans out of order", body);
    last = s.end;
  }
  const std::vector<int32_t> special = tok.encode(out.text, false);
  const std::vector<int32_t> plain = tok.encode(out.text, false, out.message_text);
  if (r.prompt != (allow_special ? special : plain)) fail("the parsed prompt is not the template's tokens", body);
  if (!byte_level_bpe) return;
  // Byte-level BPE spells the text exactly: walk the tokens' bytes; no special token may lie in
  // a message's text.
  size_t at = 0, span = 0;
  for (int32_t id : plain) {
    const std::string bytes = lw::text::detail::byte_level_bytes(tok.id_to_piece(id));
    if (out.text.compare(at, bytes.size(), bytes) != 0) fail("the tokens do not spell the rendered text", body);
    if (tok.is_special(id)) {
      while (span < out.message_text.size() && out.message_text[span].end <= at) ++span;
      if (span < out.message_text.size() && out.message_text[span].begin < at + bytes.size())
        fail("special token " + tok.id_to_piece(id) + " read inside a message's text", body);
    }
    at += bytes.size();
  }
  if (at != out.text.size()) fail("the tokens stop short of the rendered text", body);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Fixture& f = fixture();
  const uint8_t sel = data[0];
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const bool chat = sel & 1, spm = sel & 0x10, allow_special = sel & 0x20;
  const size_t t = ((sel >> 1) & 7) % f.templates.size();
  const Tokenizer& tok = f.tokenizers[spm ? 1 : 0];
  ApiModel model;
  model.name = "smol";
  model.tokenizer = &tok;
  model.chat = f.templates[t].get();
  model.context = kContext;
  model.allow_special_in_content = allow_special;
  nlohmann::json j;
  ParsedRequest r;
  try {
    j = lw::server::parse_body(body);
    r = lw::server::parse_request(j, chat, model);
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status > 499) fail("ApiError status " + std::to_string(e.status), body);
    if (lw::server::error_json(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).empty())
      fail("an empty error object", body);
    return 0;
  } catch (const lw::Error& e) {
    // The server answers these with 400 too (the tokenizer refused the text); they must name why.
    if (std::string(e.what()).empty()) fail("an lw::Error without a message", body);
    return 0;
  }
  check_parsed(r, tok, body);
  if (chat) check_chat(j, *f.templates[t], tok, !spm, allow_special, r, body);
  return 0;
}
