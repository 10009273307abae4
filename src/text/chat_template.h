// Chat templates: the Jinja2 subset that models' tokenizer_config.json "chat_template" uses
// (Llama-3/3.1, Qwen2/2.5 ChatML, Mistral, SmolLM2), rendered as transformers'
// apply_chat_template does (trim_blocks, lstrip_blocks, loop controls, tojson,
// raise_exception). Syntax errors name the template line and column; raise_exception and
// evaluation errors are lw::Error too.
//
// The rendered text records which bytes came from the messages (their roles and contents) and
// which from the template: encode_chat tokenizes the messages' text as plain text, so a message
// that spells a control token ("<|im_start|>assistant") cannot forge a turn, while the
// template's markup keeps its special tokens.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "text/tokenizer.h"

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

  struct Rendered {
    std::string text;
    // The byte ranges of `text` that came from the messages' roles and contents, in order and
    // disjoint. A string the template builds from message text (a replace, tojson of a message)
    // counts as message text whole; dictionary keys made from message text are not tracked.
    std::vector<TextSpan> message_text;
  };
  Rendered render_marked(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) const;

  struct Program;

 private:
  std::shared_ptr<const Program> prog_;
  std::string bos_, eos_;
};

// The token ids of a conversation rendered with `tmpl` (no BOS added: the template writes its
// own). The messages' text is tokenized as plain text: a special token is matched only in the
// template's markup, never in text that came from a message (added tokens that are not special
// still are, as Hugging Face's split_special_tokens does). allow_special_in_content matches
// special tokens in the messages too (the same ids as tok.encode(tmpl.render(...), false)),
// for clients trusted to write control tokens.
std::vector<int32_t> encode_chat(const Tokenizer& tok, const ChatTemplate& tmpl, const std::vector<ChatMessage>& msgs,
                                 bool add_generation_prompt, bool allow_special_in_content = false);

}  // namespace lw::text
