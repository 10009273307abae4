// ChatTemplate: the messages and tokens as the template's globals, rendered by the Jinja
// interpreter of template_{value,lexer,parser,eval}.
#include "text/chat_template.h"

#include <utility>

#include "text/template_eval.h"
#include "text/template_lexer.h"
#include "text/template_parser.h"

namespace lw::text {

struct ChatTemplate::Program {
  jinja::Body body;
};

ChatTemplate::ChatTemplate(std::string jinja_source, std::string bos_token, std::string eos_token)
    : bos_(std::move(bos_token)), eos_(std::move(eos_token)) {
  auto prog = std::make_shared<Program>();
  prog->body = jinja::parse(jinja::lex(std::move(jinja_source)));
  prog_ = std::move(prog);
}

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

std::string ChatTemplate::render(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) const {
  return render_marked(msgs, add_generation_prompt).text;
}

ChatTemplate::Rendered ChatTemplate::render_marked(const std::vector<ChatMessage>& msgs,
                                                   bool add_generation_prompt) const {
  using jinja::Value;
  jinja::List list;
  for (const auto& m : msgs) {
    Value d = Value::make_dict();
    d.dict->set("role", Value::str(m.role, true));
    d.dict->set("content", Value::str(m.content, true));
    list.push_back(d);
  }
  jinja::Globals g;
  g["messages"] = Value::make_list(std::move(list));
  g["add_generation_prompt"] = Value::boolean(add_generation_prompt);
  g["bos_token"] = Value::str(bos_);
  g["eos_token"] = Value::str(eos_);
  Rendered r;
  std::string marks;
  r.text = jinja::evaluate(prog_->body, std::move(g), &marks);
  for (size_t i = 0; i < marks.size();) {
    if (!marks[i]) {
      ++i;
      continue;
    }
    const size_t begin = i;
    while (i < marks.size() && marks[i]) ++i;
    r.message_text.push_back({begin, i});
  }
  return r;
}

std::vector<int32_t> encode_chat(const Tokenizer& tok, const ChatTemplate& tmpl, const std::vector<ChatMessage>& msgs,
                                 bool add_generation_prompt, bool allow_special_in_content) {
  const ChatTemplate::Rendered r = tmpl.render_marked(msgs, add_generation_prompt);
  if (allow_special_in_content) return tok.encode(r.text, false);
  return tok.encode(r.text, false, r.message_text);
}

}  // namespace lw::text
