// The chat-template parser (internal to text/): the AST (expressions and statements) and a
// recursive-descent parser from the lexer's pieces, with Jinja's operator precedence.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/template_lexer.h"
#include "text/template_value.h"

namespace lw::text::jinja {

struct Expr;
using ExprP = std::shared_ptr<Expr>;
struct Expr {
  enum K { Lit, Name, Attr, Index, Slice, Call, Filter, Test, Unary, Binary, Cond, ListLit, DictLit } k;
  Value lit;
  std::string name;          // Name, Attr, Filter, Test, op for Unary/Binary
  std::vector<ExprP> args;   // operands / positional args (Call: args[0] is the callee)
  std::vector<std::pair<std::string, ExprP>> kwargs;
  bool negate = false;       // Test: "is not"
  int line = 0, col = 0;
};

struct Node;
using Body = std::vector<std::shared_ptr<Node>>;
struct Node {
  enum K { Text, Output, If, For, Set, Break, Continue } k;
  std::string text;
  ExprP expr;                                // Output, Set value, For iterable
  std::vector<std::pair<ExprP, Body>> branches;  // If
  Body body, else_body;
  std::vector<std::string> targets;          // For loop variables; Set: name or ns.attr
  ExprP filter;                              // For ... if
  int line = 0, col = 0;
};

// The template's statements; throws lw::Error naming the line and column on a syntax error.
Body parse(std::vector<Piece> pieces);

}  // namespace lw::text::jinja
