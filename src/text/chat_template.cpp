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
  using jinja::Value;
  jinja::List list;
  for (const auto& m : msgs) {
    Value d = Value::make_dict();
    d.dict->set("role", Value::str(m.role));
    d.dict->set("content", Value::str(m.content));
    list.push_back(d);
  }
  jinja::Globals g;
  g["messages"] = Value::make_list(std::move(list));
  g["add_generation_prompt"] = Value::boolean(add_generation_prompt);
  g["bos_token"] = Value::str(bos_);
  g["eos_token"] = Value::str(eos_);
  return jinja::evaluate(prog_->body, std::move(g));
}

}  // namespace lw::text
