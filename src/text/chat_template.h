// Chat templates: the Jinja2 subset that models' tokenizer_config.json "chat_template" uses
// (Llama-3/3.1, Qwen2/2.5 ChatML, Mistral, SmolLM2), rendered as transformers'
// apply_chat_template does (trim_blocks, lstrip_blocks, loop controls, tojson,
// raise_exception). Syntax errors name the template line and column; raise_exception and
// evaluation errors are lw::Error too.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace lw::text {

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  // Parses the template; throws lw::Error on a syntax error.
  ChatTemplate(std::string jinja_source, std::string bos_token, std::string eos_token);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // Variables: messages, add_generation_prompt, bos_token, eos_token (tools stays undefined).
  std::string render(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) const;

  struct Program;

 private:
  std::shared_ptr<const Program> prog_;
  std::string bos_, eos_;
};

}  // namespace lw::text
