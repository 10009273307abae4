// The chat-template lexer (internal to text/): splits a Jinja source into text, {{ expression }}
// and {% statement %} pieces, applying Jinja's whitespace rules as transformers configures them
// (trim_blocks, lstrip_blocks, "-" and "+" markers; comments dropped; newlines normalised and one
// trailing newline dropped), and tokenises each tag.
#pragma once
#include <string>
#include <vector>

namespace lw::text::jinja {

struct Tok {
  enum K { Name, Str, Int, Float, Op, End } k = End;
  std::string text;
  int line = 0, col = 0;
};

struct Piece {
  enum K { Text, Expr, Stmt } k;
  std::string text;      // Text
  std::vector<Tok> toks;  // Expr/Stmt, terminated by an End token
  int line = 0, col = 0;
};

// Throws lw::Error "chat template syntax error at line L col C: msg".
[[noreturn]] void syntax_error(int line, int col, const std::string& msg);

// The pieces of a template in source order; throws on an unterminated tag, comment or string.
std::vector<Piece> lex(std::string source);

}  // namespace lw::text::jinja
