// libFuzzer harness over the chat-template interpreter fed a template's source: the lexer, the
// parser and the evaluator over a fixed conversation. A template comes with a model file, so a
// bad one must be an lw::Error, never a crash, a hang or unbounded memory.
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  static const std::vector<lw::text::ChatMessage> msgs = {
      {"system", "Be brief."}, {"user", "Hi <|im_start|> {{ x }}"}, {"assistant", "Hello."}, {"user", "Bye"}};
  try {
    const lw::text::ChatTemplate t(source, "<s>", "</s>");
    const auto r = t.render_marked(msgs, true);
    size_t last = 0;
    for (const auto& s : r.message_text) {
      if (s.begin < last || s.end <= s.begin || s.end > r.text.size()) __builtin_trap();
      last = s.end;
    }
  } catch (const lw::Error&) {
  }
  return 0;
}
