// A small Jinja2 interpreter: lexer (with Jinja's whitespace rules), parser to an AST and a
// tree-walking evaluator over a JSON-like Value with Python semantics for printing,
// truthiness and comparison.
#include "text/chat_template.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>

#include "base/error.h"

namespace lw::text {

namespace {

// ---------------------------------------------------------------- values

struct Value;
using List = std::vector<Value>;
struct Dict;

struct Value {
  enum class T { Undefined, None, Bool, Int, Float, Str, List, Dict, Func } t = T::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // Str; Func: the global's name
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;

  static Value none() { Value v; v.t = T::None; return v; }
  static Value boolean(bool x) { Value v; v.t = T::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.t = T::Int; v.i = x; return v; }
  static Value real(double x) { Value v; v.t = T::Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.t = T::Str; v.s = std::move(x); return v; }
  static Value func(std::string name) { Value v; v.t = T::Func; v.s = std::move(name); return v; }
  static Value make_list(List l = {}) { Value v; v.t = T::List; v.list = std::make_shared<List>(std::move(l)); return v; }
  static Value make_dict();
  bool defined() const { return t != T::Undefined; }
  bool is_num() const { return t == T::Int || t == T::Float || t == T::Bool; }
  double num() const { return t == T::Float ? f : t == T::Int ? double(i) : double(b); }
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& k) const {
    for (const auto& [key, v] : items)
      if (key == k) return &v;
    return nullptr;
  }
  void set(const std::string& k, Value v) {
    for (auto& [key, old] : items)
      if (key == k) { old = std::move(v); return; }
    items.emplace_back(k, std::move(v));
  }
};

Value Value::make_dict() { Value v; v.t = T::Dict; v.dict = std::make_shared<Dict>(); return v; }

bool truthy(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined: case Value::T::None: return false;
    case Value::T::Bool: return v.b;
    case Value::T::Int: return v.i != 0;
    case Value::T::Float: return v.f != 0;
    case Value::T::Str: return !v.s.empty();
    case Value::T::List: return !v.list->empty();
    case Value::T::Dict: return !v.dict->items.empty();
    case Value::T::Func: return true;
  }
  return false;
}

std::string py_float(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (std::isnan(d)) return "nan";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string py_repr_str(const std::string& s) {
  char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') { out += '\\'; out += c; }
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out + q;
}

std::string to_str(const Value& v, bool repr = false) {
  switch (v.t) {
    case Value::T::Undefined: return "";
    case Value::T::None: return "None";
    case Value::T::Bool: return v.b ? "True" : "False";
    case Value::T::Int: return std::to_string(v.i);
    case Value::T::Float: return py_float(v.f);
    case Value::T::Str: return repr ? py_repr_str(v.s) : v.s;
    case Value::T::Func: return "<function " + v.s + ">";
    case Value::T::List: {
      std::string out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + to_str((*v.list)[k], true);
      return out + "]";
    }
    case Value::T::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        out += (first ? "" : ", ") + py_repr_str(k) + ": " + to_str(x, true);
        first = false;
      }
      return out + "}";
    }
  }
  return "";
}

void json_escape(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

// Python json.dumps(ensure_ascii=False) with its default separators.
void to_json(const Value& v, int indent, int depth, std::string& out) {
  auto nl = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(size_t(indent * d), ' ');
  };
  switch (v.t) {
    case Value::T::Undefined: case Value::T::None: out += "null"; break;
    case Value::T::Bool: out += v.b ? "true" : "false"; break;
    case Value::T::Int: out += std::to_string(v.i); break;
    case Value::T::Float: out += py_float(v.f); break;
    case Value::T::Str: json_escape(v.s, out); break;
    case Value::T::Func: LW_FAIL("chat template: tojson of a function");
    case Value::T::List:
      if (v.list->empty()) { out += "[]"; break; }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += indent >= 0 ? "," : ", ";
        nl(depth + 1);
        to_json((*v.list)[k], indent, depth + 1, out);
      }
      nl(depth);
      out += ']';
      break;
    case Value::T::Dict: {
      if (v.dict->items.empty()) { out += "{}"; break; }
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        nl(depth + 1);
        json_escape(k, out);
        out += ": ";
        to_json(x, indent, depth + 1, out);
      }
      nl(depth);
      out += '}';
      break;
    }
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_num() && b.is_num()) {
    if (a.t == Value::T::Float || b.t == Value::T::Float) return a.num() == b.num();
    return (a.t == Value::T::Int ? a.i : int64_t(a.b)) == (b.t == Value::T::Int ? b.i : int64_t(b.b));
  }
  if (a.t != b.t) return false;
  switch (a.t) {
    case Value::T::Undefined: case Value::T::None: return true;
    case Value::T::Str: case Value::T::Func: return a.s == b.s;
    case Value::T::List:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::T::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, x] : a.dict->items) {
        const Value* y = b.dict->find(k);
        if (!y || !equal(x, *y)) return false;
      }
      return true;
    }
    default: return false;
  }
}

// ---------------------------------------------------------------- lexer

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

[[noreturn]] void syntax_error(int line, int col, const std::string& msg) {
  LW_FAIL("chat template syntax error at line " << line << " col " << col << ": " << msg);
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Piece> run() {
    // Jinja normalizes newlines and drops one trailing newline.
    std::string s;
    for (size_t k = 0; k < src_.size(); ++k) {
      if (src_[k] == '\r') {
        s += '\n';
        if (k + 1 < src_.size() && src_[k + 1] == '\n') ++k;
      } else {
        s += src_[k];
      }
    }
    if (!s.empty() && s.back() == '\n') s.pop_back();
    src_ = std::move(s);

    std::vector<Piece> out;
    bool strip_next = false;    // a "-" closed the previous tag
    bool line_starting = true;  // the previous tag's match ended a line
    size_t pos = 0;
    while (pos <= src_.size()) {
      size_t open = find_open(pos);
      std::string text = src_.substr(pos, open - pos);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
        text.erase(0, k);
      }
      if (open == src_.size()) {
        if (!text.empty()) out.push_back({Piece::Text, text, {}, 0, 0});
        break;
      }
      char kind = src_[open + 1];
      size_t body = open + 2;
      bool lstrip_minus = body < src_.size() && src_[body] == '-';
      bool plus = body < src_.size() && src_[body] == '+';
      if (lstrip_minus || plus) ++body;
      if (lstrip_minus) {
        while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
      } else if (!plus && kind != '{') {
        // lstrip_blocks: whitespace between a line start and a block/comment tag goes away.
        size_t l = text.rfind('\n');
        size_t lpos = l == std::string::npos ? 0 : l + 1;
        if (lpos > 0 || line_starting) {
          bool ws = true;
          for (size_t k = lpos; k < text.size(); ++k) ws = ws && (text[k] == ' ' || text[k] == '\t');
          if (ws) text.erase(lpos);
        }
      }
      if (!text.empty()) out.push_back({Piece::Text, text, {}, 0, 0});
      auto [line, col] = line_col(open);
      if (kind == '#') {
        size_t close = src_.find("#}", body);
        if (close == std::string::npos) syntax_error(line, col, "unterminated comment");
        strip_next = close > body && src_[close - 1] == '-';
        pos = close + 2;
        line_starting = false;
        if (!strip_next && pos < src_.size() && src_[pos] == '\n') {
          ++pos;  // trim_blocks
          line_starting = true;
        }
        continue;
      }
      Piece p{kind == '{' ? Piece::Expr : Piece::Stmt, "", {}, line, col};
      pos = lex_tag(body, kind == '{' ? '}' : '%', p.toks, strip_next);
      line_starting = false;
      if (kind == '%' && !strip_next && pos < src_.size() && src_[pos] == '\n') {
        ++pos;  // trim_blocks
        line_starting = true;
      }
      out.push_back(std::move(p));
    }
    return out;
  }

 private:
  std::string src_;

  size_t find_open(size_t pos) const {
    for (size_t k = pos; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return src_.size();
  }

  std::pair<int, int> line_col(size_t off) const {
    int line = 1, col = 1;
    for (size_t k = 0; k < off && k < src_.size(); ++k) {
      if (src_[k] == '\n') { ++line; col = 1; } else { ++col; }
    }
    return {line, col};
  }

  // Tokens of one tag up to its closer; returns the position after the closer.
  size_t lex_tag(size_t p, char closer, std::vector<Tok>& toks, bool& strip_next) {
    int depth = 0;
    for (;;) {
      while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) ++p;
      auto [line, col] = line_col(p);
      if (p >= src_.size()) syntax_error(line, col, "unterminated tag");
      char c = src_[p];
      auto at = [&](const char* lit) { return src_.compare(p, std::strlen(lit), lit) == 0; };
      if (depth == 0) {
        std::string end = std::string(1, closer) + "}";
        if (at(("-" + end).c_str())) { strip_next = true; toks.push_back({Tok::End, "", line, col}); return p + 3; }
        if (at(end.c_str())) { strip_next = false; toks.push_back({Tok::End, "", line, col}); return p + 2; }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
        toks.push_back({Tok::Name, src_.substr(p, q - p), line, col});
        p = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t q = p;
        while (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) ++q;
        bool is_float = q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]));
        if (is_float) {
          ++q;
          while (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) ++q;
        }
        toks.push_back({is_float ? Tok::Float : Tok::Int, src_.substr(p, q - p), line, col});
        p = q;
      } else if (c == '\'' || c == '"') {
        std::string v;
        size_t q = p + 1;
        for (;;) {
          if (q >= src_.size()) syntax_error(line, col, "unterminated string");
          char d = src_[q];
          if (d == c) break;
          if (d == '\\' && q + 1 < src_.size()) {
            char e = src_[q + 1];
            q += 2;
            switch (e) {
              case 'n': v += '\n'; break;
              case 't': v += '\t'; break;
              case 'r': v += '\r'; break;
              case '0': v += '\0'; break;
              case '\\': v += '\\'; break;
              case '\'': v += '\''; break;
              case '"': v += '"'; break;
              case '\n': break;
              case 'u': case 'x': {
                size_t n = e == 'u' ? 4 : 2;
                if (q + n > src_.size()) syntax_error(line, col, "bad escape");
                uint32_t cp = std::stoul(src_.substr(q, n), nullptr, 16);
                q += n;
                if (cp < 0x80) v += char(cp);
                else if (cp < 0x800) { v += char(0xC0 | (cp >> 6)); v += char(0x80 | (cp & 0x3F)); }
                else { v += char(0xE0 | (cp >> 12)); v += char(0x80 | ((cp >> 6) & 0x3F)); v += char(0x80 | (cp & 0x3F)); }
                break;
              }
              default: v += '\\'; v += e;
            }
            continue;
          }
          v += d;
          ++q;
        }
        toks.push_back({Tok::Str, v, line, col});
        p = q + 1;
      } else {
        static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                    "=", "(", ")", "[", "]", "{", "}", ".", ",", ":", "|"};
        bool found = false;
        for (const char* op : ops) {
          if (at(op)) {
            std::string o = op;
            if (o == "(" || o == "[" || o == "{") ++depth;
            if (o == ")" || o == "]" || o == "}") --depth;
            toks.push_back({Tok::Op, o, line, col});
            p += o.size();
            found = true;
            break;
          }
        }
        if (!found) syntax_error(line, col, std::string("unexpected character '") + c + "'");
      }
    }
  }
};

// ---------------------------------------------------------------- AST

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

class Parser {
 public:
  explicit Parser(std::vector<Piece> pieces) : ps_(std::move(pieces)) {}

  Body parse_all() {
    Body b = parse_body({});
    return b;
  }

 private:
  std::vector<Piece> ps_;
  size_t pi_ = 0;
  const std::vector<Tok>* toks_ = nullptr;
  size_t ti_ = 0;

  const Tok& peek(size_t ahead = 0) const { return (*toks_)[std::min(ti_ + ahead, toks_->size() - 1)]; }
  const Tok& next() { const Tok& t = peek(); if (ti_ < toks_->size() - 1) ++ti_; return t; }
  bool is_op(const char* o, size_t ahead = 0) const { return peek(ahead).k == Tok::Op && peek(ahead).text == o; }
  bool is_name(const char* n, size_t ahead = 0) const { return peek(ahead).k == Tok::Name && peek(ahead).text == n; }
  [[noreturn]] void fail(const std::string& msg) const {
    const Tok& t = peek();
    syntax_error(t.line, t.col, msg + (t.k == Tok::End ? " (at end of tag)" : " (at '" + t.text + "')"));
  }
  void expect_op(const char* o) { if (!is_op(o)) fail(std::string("expected '") + o + "'"); next(); }
  void expect_end() { if (peek().k != Tok::End) fail("unexpected token"); }
  std::string expect_name() { if (peek().k != Tok::Name) fail("expected a name"); return next().text; }

  ExprP mk(Expr::K k, const Tok& at) { auto e = std::make_shared<Expr>(); e->k = k; e->line = at.line; e->col = at.col; return e; }

  // Parses statements until a {% name %} with name in `stop`; leaves pi_ at that tag.
  Body parse_body(const std::vector<std::string>& stop) {
    Body out;
    while (pi_ < ps_.size()) {
      Piece& p = ps_[pi_];
      if (p.k == Piece::Text) {
        auto n = std::make_shared<Node>();
        n->k = Node::Text;
        n->text = p.text;
        out.push_back(n);
        ++pi_;
        continue;
      }
      toks_ = &p.toks;
      ti_ = 0;
      if (p.k == Piece::Expr) {
        auto n = std::make_shared<Node>();
        n->k = Node::Output;
        n->line = p.line;
        n->col = p.col;
        n->expr = parse_expr();
        expect_end();
        out.push_back(n);
        ++pi_;
        continue;
      }
      if (peek().k != Tok::Name) fail("expected a statement");
      std::string kw = peek().text;
      if (std::find(stop.begin(), stop.end(), kw) != stop.end()) return out;
      out.push_back(parse_stmt(kw));
    }
    if (!stop.empty()) {
      const Piece& last = ps_.empty() ? Piece{} : ps_.back();
      syntax_error(last.line, last.col, "missing {% " + stop.back() + " %}");
    }
    return out;
  }

  void enter_tag() {
    toks_ = &ps_[pi_].toks;
    ti_ = 0;
  }

  std::shared_ptr<Node> parse_stmt(const std::string& kw) {
    auto n = std::make_shared<Node>();
    n->line = peek().line;
    n->col = peek().col;
    next();
    if (kw == "if") {
      n->k = Node::If;
      ExprP cond = parse_expr();
      expect_end();
      ++pi_;
      for (;;) {
        Body b = parse_body({"elif", "else", "endif"});
        n->branches.emplace_back(cond, std::move(b));
        if (pi_ >= ps_.size()) syntax_error(n->line, n->col, "missing {% endif %}");
        enter_tag();
        std::string t = next().text;
        if (t == "elif") {
          cond = parse_expr();
          expect_end();
          ++pi_;
        } else if (t == "else") {
          expect_end();
          ++pi_;
          n->else_body = parse_body({"endif"});
          enter_tag();
          next();
          expect_end();
          ++pi_;
          break;
        } else {
          expect_end();
          ++pi_;
          break;
        }
      }
    } else if (kw == "for") {
      n->k = Node::For;
      n->targets.push_back(expect_name());
      while (is_op(",")) {
        next();
        n->targets.push_back(expect_name());
      }
      if (!is_name("in")) fail("expected 'in'");
      next();
      n->expr = parse_ternary(false);
      if (is_name("if")) {
        next();
        n->filter = parse_ternary(false);
      }
      expect_end();
      ++pi_;
      n->body = parse_body({"else", "endfor"});
      enter_tag();
      if (next().text == "else") {
        expect_end();
        ++pi_;
        n->else_body = parse_body({"endfor"});
        enter_tag();
        next();
      }
      expect_end();
      ++pi_;
    } else if (kw == "set") {
      n->k = Node::Set;
      n->targets.push_back(expect_name());
      if (is_op(".")) {
        next();
        n->targets.push_back(expect_name());
      }
      if (!is_op("=")) fail("block {% set %} is not supported; expected '='");
      next();
      n->expr = parse_expr();
      expect_end();
      ++pi_;
    } else if (kw == "break" || kw == "continue") {
      n->k = kw == "break" ? Node::Break : Node::Continue;
      expect_end();
      ++pi_;
    } else {
      ti_ = 0;
      fail("unknown statement '" + kw + "'");
    }
    return n;
  }

  ExprP parse_expr() { return parse_ternary(true); }

  ExprP parse_ternary(bool allow_cond) {
    ExprP e = parse_or();
    if (allow_cond && is_name("if")) {
      const Tok& at = next();
      auto c = mk(Expr::Cond, at);
      ExprP cond = parse_or();
      ExprP other;
      if (is_name("else")) {
        next();
        other = parse_ternary(true);
      }
      c->args = {cond, e, other};
      return c;
    }
    return e;
  }

  ExprP binary(const std::string& op, ExprP a, ExprP b, const Tok& at) {
    auto e = mk(Expr::Binary, at);
    e->name = op;
    e->args = {std::move(a), std::move(b)};
    return e;
  }

  ExprP parse_or() {
    ExprP e = parse_and();
    while (is_name("or")) { const Tok& at = next(); e = binary("or", e, parse_and(), at); }
    return e;
  }
  ExprP parse_and() {
    ExprP e = parse_not();
    while (is_name("and")) { const Tok& at = next(); e = binary("and", e, parse_not(), at); }
    return e;
  }
  ExprP parse_not() {
    if (is_name("not")) {
      const Tok& at = next();
      auto e = mk(Expr::Unary, at);
      e->name = "not";
      e->args = {parse_not()};
      return e;
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    ExprP e = parse_math1();
    for (;;) {
      static const char* ops[] = {"==", "!=", "<=", ">=", "<", ">"};
      bool done = true;
      for (const char* o : ops) {
        if (is_op(o)) {
          const Tok& at = next();
          e = binary(o, e, parse_math1(), at);
          done = false;
          break;
        }
      }
      if (!done) continue;
      if (is_name("in")) {
        const Tok& at = next();
        e = binary("in", e, parse_math1(), at);
      } else if (is_name("not") && is_name("in", 1)) {
        const Tok& at = next();
        next();
        e = binary("not in", e, parse_math1(), at);
      } else {
        return e;
      }
    }
  }
  ExprP parse_math1() {
    ExprP e = parse_concat();
    while (is_op("+") || is_op("-")) { const Tok& at = next(); e = binary(at.text, e, parse_concat(), at); }
    return e;
  }
  ExprP parse_concat() {
    ExprP e = parse_math2();
    while (is_op("~")) { const Tok& at = next(); e = binary("~", e, parse_math2(), at); }
    return e;
  }
  ExprP parse_math2() {
    ExprP e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) { const Tok& at = next(); e = binary(at.text, e, parse_pow(), at); }
    return e;
  }
  ExprP parse_pow() {
    ExprP e = parse_unary();
    while (is_op("**")) { const Tok& at = next(); e = binary("**", e, parse_unary(), at); }
    return e;
  }
  ExprP parse_unary() {
    if (is_op("-") || is_op("+")) {
      const Tok& at = next();
      auto e = mk(Expr::Unary, at);
      e->name = at.text;
      e->args = {parse_unary()};
      return parse_filters(e);
    }
    ExprP e = parse_postfix(parse_primary());
    return parse_filters(e);
  }

  void parse_call_args(ExprP& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().k == Tok::Name && is_op("=", 1)) {
        std::string k = next().text;
        next();
        e->kwargs.emplace_back(k, parse_expr());
      } else {
        e->args.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprP parse_filters(ExprP e) {
    for (;;) {
      if (is_op("|")) {
        next();
        const Tok& at = peek();
        auto f = mk(Expr::Filter, at);
        f->name = expect_name();
        f->args.push_back(e);
        if (is_op("(")) parse_call_args(f);
        e = f;
      } else if (is_name("is")) {
        const Tok& at = next();
        auto t = mk(Expr::Test, at);
        if (is_name("not")) { next(); t->negate = true; }
        t->name = expect_name();
        t->args.push_back(e);
        if (is_op("(")) {
          parse_call_args(t);
        } else if (peek().k == Tok::Str || peek().k == Tok::Int || peek().k == Tok::Float ||
                   (peek().k == Tok::Name && !is_name("and") && !is_name("or") && !is_name("else") &&
                    !is_name("if") && !is_name("in") && !is_name("not") && !is_name("is"))) {
          t->args.push_back(parse_primary());  // "is equalto 'x'"
        }
        e = t;
      } else {
        return e;
      }
    }
  }

  ExprP parse_postfix(ExprP e) {
    for (;;) {
      if (is_op(".")) {
        const Tok& at = next();
        auto a = mk(Expr::Attr, at);
        if (peek().k == Tok::Int) a->name = next().text;
        else a->name = expect_name();
        a->args = {e};
        e = a;
      } else if (is_op("[")) {
        const Tok& at = next();
        ExprP parts[3];
        bool slice = false;
        int k = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            next();
            slice = true;
            if (++k > 2) fail("bad slice");
            continue;
          }
          parts[k] = parse_expr();
        }
        expect_op("]");
        auto s = mk(slice ? Expr::Slice : Expr::Index, at);
        s->args = {e, parts[0], parts[1], parts[2]};
        if (!slice && !parts[0]) fail("empty subscript");
        e = s;
      } else if (is_op("(")) {
        auto c = mk(Expr::Call, peek());
        c->args.push_back(e);
        parse_call_args(c);
        e = c;
      } else {
        return e;
      }
    }
  }

  ExprP parse_primary() {
    const Tok& t = peek();
    if (t.k == Tok::Str) {
      next();
      std::string s = t.text;
      while (peek().k == Tok::Str) s += next().text;  // adjacent literals concatenate
      auto e = mk(Expr::Lit, t);
      e->lit = Value::str(s);
      return e;
    }
    if (t.k == Tok::Int || t.k == Tok::Float) {
      next();
      auto e = mk(Expr::Lit, t);
      e->lit = t.k == Tok::Int ? Value::integer(std::stoll(t.text)) : Value::real(std::stod(t.text));
      return e;
    }
    if (t.k == Tok::Name) {
      next();
      auto e = mk(Expr::Lit, t);
      if (t.text == "true" || t.text == "True") e->lit = Value::boolean(true);
      else if (t.text == "false" || t.text == "False") e->lit = Value::boolean(false);
      else if (t.text == "none" || t.text == "None") e->lit = Value::none();
      else { e->k = Expr::Name; e->name = t.text; }
      return e;
    }
    if (is_op("(")) {
      next();
      ExprP e = parse_expr();
      if (is_op(",")) {  // a tuple: treated as a list
        auto l = mk(Expr::ListLit, t);
        l->args.push_back(e);
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          l->args.push_back(parse_expr());
        }
        e = l;
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto l = mk(Expr::ListLit, t);
      while (!is_op("]")) {
        l->args.push_back(parse_expr());
        if (!is_op(",")) break;
        next();
      }
      expect_op("]");
      return l;
    }
    if (is_op("{")) {
      next();
      auto d = mk(Expr::DictLit, t);
      while (!is_op("}")) {
        d->args.push_back(parse_expr());
        expect_op(":");
        d->args.push_back(parse_expr());
        if (!is_op(",")) break;
        next();
      }
      expect_op("}");
      return d;
    }
    fail("expected an expression");
  }
};

// ---------------------------------------------------------------- evaluator

struct BreakSignal {};
struct ContinueSignal {};

class Evaluator {
 public:
  std::vector<std::unordered_map<std::string, Value>> scopes;
  std::string out;

  [[noreturn]] static void fail(const Expr& e, const std::string& msg) {
    LW_FAIL("chat template error at line " << e.line << " col " << e.col << ": " << msg);
  }

  Value lookup(const std::string& n) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto f = it->find(n);
      if (f != it->end()) return f->second;
    }
    static const char* globals[] = {"raise_exception", "namespace", "range", "strftime_now"};
    for (const char* g : globals)
      if (n == g) return Value::func(n);
    return {};
  }

  void exec(const Body& body) {
    for (const auto& n : body) exec(*n);
  }

  void exec(const Node& n) {
    switch (n.k) {
      case Node::Text: out += n.text; break;
      case Node::Output: out += to_str(eval(*n.expr)); break;
      case Node::If:
        for (const auto& [cond, body] : n.branches) {
          if (truthy(eval(*cond))) { exec(body); return; }
        }
        exec(n.else_body);
        break;
      case Node::Set: {
        Value v = eval(*n.expr);
        if (n.targets.size() == 1) {
          scopes.back()[n.targets[0]] = std::move(v);
        } else {
          Value ns = lookup(n.targets[0]);
          if (ns.t != Value::T::Dict) fail(*n.expr, "cannot set attribute of '" + n.targets[0] + "'");
          ns.dict->set(n.targets[1], std::move(v));
        }
        break;
      }
      case Node::Break: throw BreakSignal{};
      case Node::Continue: throw ContinueSignal{};
      case Node::For: exec_for(n); break;
    }
  }

  List iterate(const Value& v, const Expr& at) {
    switch (v.t) {
      case Value::T::List: return *v.list;
      case Value::T::Dict: {
        List l;
        for (const auto& [k, x] : v.dict->items) l.push_back(Value::str(k));
        return l;
      }
      case Value::T::Str: {
        List l;
        for (size_t k = 0; k < v.s.size();) {
          size_t len = 1;
          unsigned char c = v.s[k];
          if (c >= 0xF0) len = 4; else if (c >= 0xE0) len = 3; else if (c >= 0xC0) len = 2;
          l.push_back(Value::str(v.s.substr(k, len)));
          k += len;
        }
        return l;
      }
      case Value::T::Undefined: return {};
      default: fail(at, "value of type " + type_name(v) + " is not iterable");
    }
  }

  void bind(const Node& n, const Value& item) {
    auto& sc = scopes.back();
    if (n.targets.size() == 1) {
      sc[n.targets[0]] = item;
      return;
    }
    if (item.t != Value::T::List || item.list->size() != n.targets.size())
      fail(*n.expr, "cannot unpack loop item into " + std::to_string(n.targets.size()) + " names");
    for (size_t k = 0; k < n.targets.size(); ++k) sc[n.targets[k]] = (*item.list)[k];
  }

  void exec_for(const Node& n) {
    List items = iterate(eval(*n.expr), *n.expr);
    if (n.filter) {
      List kept;
      for (const auto& it : items) {
        scopes.emplace_back();
        bind(n, it);
        bool keep = truthy(eval(*n.filter));
        scopes.pop_back();
        if (keep) kept.push_back(it);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(n.else_body);
      return;
    }
    int64_t len = int64_t(items.size());
    for (int64_t k = 0; k < len; ++k) {
      scopes.emplace_back();
      bind(n, items[k]);
      Value loop = Value::make_dict();
      loop.dict->set("index", Value::integer(k + 1));
      loop.dict->set("index0", Value::integer(k));
      loop.dict->set("revindex", Value::integer(len - k));
      loop.dict->set("revindex0", Value::integer(len - k - 1));
      loop.dict->set("first", Value::boolean(k == 0));
      loop.dict->set("last", Value::boolean(k == len - 1));
      loop.dict->set("length", Value::integer(len));
      loop.dict->set("previtem", k > 0 ? items[k - 1] : Value{});
      loop.dict->set("nextitem", k + 1 < len ? items[k + 1] : Value{});
      scopes.back()["loop"] = loop;
      bool stop = false;
      try {
        exec(n.body);
      } catch (const BreakSignal&) {
        stop = true;
      } catch (const ContinueSignal&) {
      }
      scopes.pop_back();
      if (stop) break;
    }
  }

  static std::string type_name(const Value& v) {
    static const char* names[] = {"undefined", "none", "bool", "int", "float", "string", "list", "dict", "function"};
    return names[int(v.t)];
  }

  Value get_attr(const Value& obj, const std::string& name, const Expr& at) {
    if (obj.t == Value::T::Dict) {
      const Value* v = obj.dict->find(name);
      return v ? *v : Value{};
    }
    if (obj.t == Value::T::Undefined) fail(at, "undefined value has no attribute '" + name + "'");
    if (obj.t == Value::T::List && !name.empty() && std::isdigit(static_cast<unsigned char>(name[0])))
      return get_index(obj, Value::integer(std::stoll(name)), at);
    return {};
  }

  Value get_index(const Value& obj, const Value& key, const Expr& at) {
    if (obj.t == Value::T::Dict) {
      if (key.t != Value::T::Str) return {};
      const Value* v = obj.dict->find(key.s);
      return v ? *v : Value{};
    }
    if (obj.t == Value::T::List || obj.t == Value::T::Str) {
      if (key.t != Value::T::Int) fail(at, "index must be an integer");
      int64_t n = obj.t == Value::T::List ? int64_t(obj.list->size()) : int64_t(obj.s.size());
      int64_t k = key.i < 0 ? key.i + n : key.i;
      if (k < 0 || k >= n) return {};
      return obj.t == Value::T::List ? (*obj.list)[k] : Value::str(obj.s.substr(k, 1));
    }
    if (obj.t == Value::T::Undefined) fail(at, "undefined value is not subscriptable");
    return {};
  }

  Value eval(const Expr& e) {
    switch (e.k) {
      case Expr::Lit: return e.lit;
      case Expr::Name: return lookup(e.name);
      case Expr::Attr: return get_attr(eval(*e.args[0]), e.name, e);
      case Expr::Index: return get_index(eval(*e.args[0]), eval(*e.args[1]), e);
      case Expr::Slice: return slice(e);
      case Expr::ListLit: {
        List l;
        for (const auto& a : e.args) l.push_back(eval(*a));
        return Value::make_list(std::move(l));
      }
      case Expr::DictLit: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k]);
          if (key.t != Value::T::Str) fail(e, "dict keys must be strings");
          d.dict->set(key.s, eval(*e.args[k + 1]));
        }
        return d;
      }
      case Expr::Cond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value{};
      case Expr::Unary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (!v.is_num()) fail(e, "unary " + e.name + " on " + type_name(v));
        if (e.name == "+") return v;
        return v.t == Value::T::Float ? Value::real(-v.f) : Value::integer(-(v.t == Value::T::Int ? v.i : int64_t(v.b)));
      }
      case Expr::Binary: return binary(e);
      case Expr::Call: return call(e);
      case Expr::Filter: return filter(e);
      case Expr::Test: return Value::boolean(test(e) != e.negate);
    }
    return {};
  }

  Value slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    int64_t n;
    if (obj.t == Value::T::List) n = int64_t(obj.list->size());
    else if (obj.t == Value::T::Str) n = int64_t(obj.s.size());
    else fail(e, "cannot slice " + type_name(obj));
    auto opt = [&](const ExprP& p, int64_t def) -> int64_t {
      if (!p) return def;
      Value v = eval(*p);
      if (v.t == Value::T::None) return def;
      if (v.t != Value::T::Int) fail(e, "slice bounds must be integers");
      return v.i;
    };
    int64_t step = opt(e.args[3], 1);
    if (step == 0) fail(e, "slice step cannot be zero");
    int64_t lo_def = step > 0 ? 0 : n - 1, hi_def = step > 0 ? n : -n - 1;
    int64_t a = opt(e.args[1], lo_def), b = opt(e.args[2], hi_def);
    auto clamp = [&](int64_t x, bool neg_step) {
      if (x < 0) x += n;
      if (neg_step) return std::clamp<int64_t>(x, -1, n - 1);
      return std::clamp<int64_t>(x, 0, n);
    };
    if (e.args[1]) a = clamp(a, step < 0);
    if (e.args[2]) b = clamp(b, step < 0);
    else if (step < 0) b = -1;
    List l;
    std::string s;
    for (int64_t k = a; step > 0 ? k < b : k > b; k += step) {
      if (obj.t == Value::T::List) l.push_back((*obj.list)[k]);
      else s += obj.s[k];
    }
    return obj.t == Value::T::List ? Value::make_list(std::move(l)) : Value::str(s);
  }

  bool contains(const Value& hay, const Value& needle, const Expr& e) {
    if (hay.t == Value::T::Str) {
      if (needle.t != Value::T::Str) fail(e, "'in <string>' needs a string");
      return hay.s.find(needle.s) != std::string::npos;
    }
    if (hay.t == Value::T::List) {
      for (const auto& x : *hay.list)
        if (equal(x, needle)) return true;
      return false;
    }
    if (hay.t == Value::T::Dict) return needle.t == Value::T::Str && hay.dict->find(needle.s) != nullptr;
    if (hay.t == Value::T::Undefined) fail(e, "'in' on an undefined value");
    fail(e, "'in' on " + type_name(hay));
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "in") return Value::boolean(contains(b, a, e));
    if (op == "not in") return Value::boolean(!contains(b, a, e));
    if (op == "~") return Value::str(to_str(a) + to_str(b));
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c;
      if (a.is_num() && b.is_num()) c = a.num() < b.num() ? -1 : a.num() > b.num() ? 1 : 0;
      else if (a.t == Value::T::Str && b.t == Value::T::Str) c = a.s.compare(b.s);
      else fail(e, "cannot compare " + type_name(a) + " and " + type_name(b));
      bool r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
      return Value::boolean(r);
    }
    if (op == "+") {
      if (a.t == Value::T::Str && b.t == Value::T::Str) return Value::str(a.s + b.s);
      if (a.t == Value::T::List && b.t == Value::T::List) {
        List l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(l));
      }
    }
    if (op == "*" && a.t == Value::T::Str && b.t == Value::T::Int) {
      std::string s;
      for (int64_t k = 0; k < b.i; ++k) s += a.s;
      return Value::str(s);
    }
    if (!a.is_num() || !b.is_num())
      fail(e, "unsupported operand types for " + op + ": " + type_name(a) + " and " + type_name(b));
    bool fl = a.t == Value::T::Float || b.t == Value::T::Float;
    int64_t x = a.t == Value::T::Int ? a.i : int64_t(a.num()), y = b.t == Value::T::Int ? b.i : int64_t(b.num());
    if (op == "/") {
      if (b.num() == 0) fail(e, "division by zero");
      return Value::real(a.num() / b.num());
    }
    if (op == "//" || op == "%") {
      if (b.num() == 0) fail(e, "division by zero");
      if (fl) {
        double q = std::floor(a.num() / b.num());
        return op == "//" ? Value::real(q) : Value::real(a.num() - q * b.num());
      }
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return op == "//" ? Value::integer(q) : Value::integer(x - q * y);
    }
    if (op == "**") {
      if (!fl && y >= 0) {
        int64_t r = 1;
        for (int64_t k = 0; k < y; ++k) r *= x;
        return Value::integer(r);
      }
      return Value::real(std::pow(a.num(), b.num()));
    }
    if (fl) {
      double r = op == "+" ? a.num() + b.num() : op == "-" ? a.num() - b.num() : a.num() * b.num();
      return Value::real(r);
    }
    return Value::integer(op == "+" ? x + y : op == "-" ? x - y : x * y);
  }

  Value kwarg(const Expr& e, const std::string& name, size_t pos, Value def) {
    for (const auto& [k, v] : e.kwargs)
      if (k == name) return eval(*v);
    if (pos < e.args.size()) return eval(*e.args[pos]);
    return def;
  }

  static std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
    size_t a = 0, b = s.size();
    auto in = [&](char c) { return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0 : chars.find(c) != std::string::npos; };
    if (left) while (a < b && in(s[a])) ++a;
    if (right) while (b > a && in(s[b - 1])) --b;
    return s.substr(a, b - a);
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.k == Expr::Attr) {
      Value obj = eval(*callee.args[0]);
      const std::string& m = callee.name;
      auto arg = [&](size_t k) { return k + 1 < e.args.size() ? eval(*e.args[k + 1]) : Value{}; };
      if (obj.t == Value::T::Str) {
        const std::string& s = obj.s;
        if (m == "strip" || m == "lstrip" || m == "rstrip") {
          Value c = arg(0);
          return Value::str(strip(s, c.t == Value::T::Str ? c.s : "", m != "rstrip", m != "lstrip"));
        }
        if (m == "upper" || m == "lower") {
          std::string r = s;
          for (auto& ch : r) ch = m == "upper" ? char(std::toupper(static_cast<unsigned char>(ch))) : char(std::tolower(static_cast<unsigned char>(ch)));
          return Value::str(r);
        }
        if (m == "startswith" || m == "endswith") {
          Value p = arg(0);
          if (p.t != Value::T::Str) fail(e, m + " needs a string");
          bool r = m == "startswith" ? s.compare(0, p.s.size(), p.s) == 0
                                     : s.size() >= p.s.size() && s.compare(s.size() - p.s.size(), p.s.size(), p.s) == 0;
          return Value::boolean(r);
        }
        if (m == "split") {
          Value sep = arg(0);
          List l;
          if (sep.t == Value::T::Str && !sep.s.empty()) {
            size_t pos = 0;
            for (size_t f; (f = s.find(sep.s, pos)) != std::string::npos; pos = f + sep.s.size()) l.push_back(Value::str(s.substr(pos, f - pos)));
            l.push_back(Value::str(s.substr(pos)));
          } else {
            size_t k = 0;
            while (k < s.size()) {
              while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
              size_t st = k;
              while (k < s.size() && !std::isspace(static_cast<unsigned char>(s[k]))) ++k;
              if (k > st) l.push_back(Value::str(s.substr(st, k - st)));
            }
          }
          return Value::make_list(std::move(l));
        }
        if (m == "replace") {
          Value a = arg(0), b = arg(1);
          if (a.t != Value::T::Str || b.t != Value::T::Str || a.s.empty()) fail(e, "replace needs two strings");
          std::string r;
          size_t pos = 0;
          for (size_t f; (f = s.find(a.s, pos)) != std::string::npos; pos = f + a.s.size()) r += s.substr(pos, f - pos) + b.s;
          return Value::str(r + s.substr(pos));
        }
      } else if (obj.t == Value::T::Dict) {
        if (m == "items") {
          List l;
          for (const auto& [k, v] : obj.dict->items) l.push_back(Value::make_list({Value::str(k), v}));
          return Value::make_list(std::move(l));
        }
        if (m == "keys" || m == "values") {
          List l;
          for (const auto& [k, v] : obj.dict->items) l.push_back(m == "keys" ? Value::str(k) : v);
          return Value::make_list(std::move(l));
        }
        if (m == "get") {
          Value k = arg(0);
          const Value* v = k.t == Value::T::Str ? obj.dict->find(k.s) : nullptr;
          return v ? *v : (e.args.size() > 2 ? arg(1) : Value::none());
        }
      }
      fail(e, "unknown method '" + m + "' on " + type_name(obj));
    }
    Value f = eval(callee);
    if (f.t != Value::T::Func) fail(e, "'" + (callee.k == Expr::Name ? callee.name : std::string("value")) + "' is not callable");
    if (f.s == "raise_exception") {
      Value msg = kwarg(e, "message", 1, Value::str(""));
      LW_FAIL("chat template raised: " << to_str(msg));
    }
    if (f.s == "namespace") {
      Value ns = Value::make_dict();
      for (const auto& [k, v] : e.kwargs) ns.dict->set(k, eval(*v));
      return ns;
    }
    if (f.s == "range") {
      std::vector<int64_t> a;
      for (size_t k = 1; k < e.args.size(); ++k) {
        Value v = eval(*e.args[k]);
        if (v.t != Value::T::Int) fail(e, "range needs integers");
        a.push_back(v.i);
      }
      int64_t lo = 0, hi = 0, step = 1;
      if (a.size() == 1) hi = a[0];
      else if (a.size() >= 2) { lo = a[0]; hi = a[1]; if (a.size() > 2) step = a[2]; }
      if (step == 0) fail(e, "range step cannot be zero");
      List l;
      for (int64_t k = lo; step > 0 ? k < hi : k > hi; k += step) l.push_back(Value::integer(k));
      return Value::make_list(std::move(l));
    }
    if (f.s == "strftime_now") {
      Value fmt = kwarg(e, "format", 1, Value::str("%Y-%m-%d"));
      std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof(buf), to_str(fmt).c_str(), &tm);
      return Value::str(std::string(buf, n));
    }
    fail(e, "unknown function '" + f.s + "'");
  }

  bool run_test(const std::string& name, const Value& v, const std::vector<Value>& args, const Expr& e) {
    if (name == "defined") return v.defined();
    if (name == "undefined") return !v.defined();
    if (name == "none") return v.t == Value::T::None;
    if (name == "string") return v.t == Value::T::Str;
    if (name == "number") return v.t == Value::T::Int || v.t == Value::T::Float;
    if (name == "integer") return v.t == Value::T::Int;
    if (name == "float") return v.t == Value::T::Float;
    if (name == "boolean") return v.t == Value::T::Bool;
    if (name == "true") return v.t == Value::T::Bool && v.b;
    if (name == "false") return v.t == Value::T::Bool && !v.b;
    if (name == "mapping") return v.t == Value::T::Dict;
    if (name == "iterable") return v.t == Value::T::List || v.t == Value::T::Dict || v.t == Value::T::Str;
    if (name == "sequence") return v.t == Value::T::List || v.t == Value::T::Str || v.t == Value::T::Dict;
    if (name == "callable") return v.t == Value::T::Func;
    if (name == "even" || name == "odd") {
      if (v.t != Value::T::Int) fail(e, "'" + name + "' test needs an integer");
      return (v.i % 2 == 0) == (name == "even");
    }
    if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") {
      if (args.empty()) fail(e, "'" + name + "' test needs an argument");
      return equal(v, args[0]);
    }
    if (name == "ne" || name == "!=") return args.empty() ? true : !equal(v, args[0]);
    if (name == "in") return !args.empty() && contains(args[0], v, e);
    fail(e, "unknown test '" + name + "'");
  }

  bool test(const Expr& e) {
    Value v = eval(*e.args[0]);
    std::vector<Value> args;
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    return run_test(e.name, v, args, e);
  }

  Value filter(const Expr& e) {
    const std::string& f = e.name;
    Value v = eval(*e.args[0]);
    auto arg = [&](size_t k) { return k + 1 < e.args.size() ? eval(*e.args[k + 1]) : Value{}; };
    if (f == "trim") {
      Value c = arg(0);
      return Value::str(strip(to_str(v), c.t == Value::T::Str ? c.s : "", true, true));
    }
    if (f == "length" || f == "count") {
      if (v.t == Value::T::Str) {
        int64_t n = 0;
        for (unsigned char c : v.s) n += (c & 0xC0) != 0x80;
        return Value::integer(n);
      }
      if (v.t == Value::T::List) return Value::integer(int64_t(v.list->size()));
      if (v.t == Value::T::Dict) return Value::integer(int64_t(v.dict->items.size()));
      if (v.t == Value::T::Undefined) return Value::integer(0);
      fail(e, "length of " + type_name(v));
    }
    if (f == "tojson") {
      Value ind = kwarg(e, "indent", 1, Value::none());
      std::string out;
      to_json(v, ind.t == Value::T::Int ? int(ind.i) : -1, 0, out);
      return Value::str(out);
    }
    if (f == "upper" || f == "lower" || f == "capitalize") {
      std::string s = to_str(v);
      for (size_t k = 0; k < s.size(); ++k) {
        unsigned char c = s[k];
        bool up = f == "upper" || (f == "capitalize" && k == 0);
        s[k] = up ? char(std::toupper(c)) : char(std::tolower(c));
      }
      return Value::str(s);
    }
    if (f == "default" || f == "d") {
      Value def = arg(0);
      bool boolean = truthy(kwarg(e, "boolean", 2, Value::boolean(false)));
      if (!v.defined() || (boolean && !truthy(v))) return def.defined() ? def : Value::str("");
      return v;
    }
    if (f == "first" || f == "last") {
      List l = iterate(v, e);
      if (l.empty()) return {};
      return f == "first" ? l.front() : l.back();
    }
    if (f == "join") {
      Value sep = arg(0);
      Value attr = kwarg(e, "attribute", 99, Value{});
      std::string out;
      List l = iterate(v, e);
      for (size_t k = 0; k < l.size(); ++k) {
        if (k) out += to_str(sep);
        out += to_str(attr.defined() ? get_attr(l[k], to_str(attr), e) : l[k]);
      }
      return Value::str(out);
    }
    if (f == "items") {
      if (v.t == Value::T::Undefined) return Value::make_list();
      if (v.t != Value::T::Dict) fail(e, "items of " + type_name(v));
      List l;
      for (const auto& [k, x] : v.dict->items) l.push_back(Value::make_list({Value::str(k), x}));
      return Value::make_list(std::move(l));
    }
    if (f == "list") return Value::make_list(iterate(v, e));
    if (f == "string") return Value::str(to_str(v));
    if (f == "safe" || f == "e" || f == "escape") return v;  // no autoescape in chat templates
    if (f == "int") {
      if (v.t == Value::T::Str) {
        try { return Value::integer(std::stoll(v.s)); } catch (...) { return Value::integer(0); }
      }
      return Value::integer(v.is_num() ? int64_t(v.num()) : 0);
    }
    if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") {
      bool attr = f == "selectattr" || f == "rejectattr";
      bool want = f == "select" || f == "selectattr";
      std::string attr_name = attr ? to_str(arg(0)) : "";
      size_t ti = attr ? 1 : 0;
      Value tname = arg(ti);
      std::vector<Value> targs;
      for (size_t k = ti + 1; k + 1 < e.args.size(); ++k) targs.push_back(arg(k));
      List out;
      for (const auto& x : iterate(v, e)) {
        Value subject = attr ? get_attr(x, attr_name, e) : x;
        bool ok = tname.defined() ? run_test(to_str(tname), subject, targs, e) : truthy(subject);
        if (ok == want) out.push_back(x);
      }
      return Value::make_list(std::move(out));
    }
    if (f == "map") {
      Value attr = kwarg(e, "attribute", 99, Value{});
      if (!attr.defined()) fail(e, "only map(attribute=...) is supported");
      List out;
      for (const auto& x : iterate(v, e)) out.push_back(get_attr(x, to_str(attr), e));
      return Value::make_list(std::move(out));
    }
    if (f == "replace") {
      Value a = arg(0), b = arg(1);
      std::string s = to_str(v), r;
      if (a.t != Value::T::Str || a.s.empty()) fail(e, "replace needs a non-empty string");
      size_t pos = 0;
      for (size_t q; (q = s.find(a.s, pos)) != std::string::npos; pos = q + a.s.size()) r += s.substr(pos, q - pos) + to_str(b);
      return Value::str(r + s.substr(pos));
    }
    fail(e, "unknown filter '" + f + "'");
  }
};

}  // namespace

struct ChatTemplate::Program {
  Body body;
};

ChatTemplate::ChatTemplate(std::string jinja_source, std::string bos_token, std::string eos_token)
    : bos_(std::move(bos_token)), eos_(std::move(eos_token)) {
  auto prog = std::make_shared<Program>();
  Parser parser(Lexer(std::move(jinja_source)).run());
  prog->body = parser.parse_all();
  prog_ = std::move(prog);
}

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

std::string ChatTemplate::render(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) const {
  Evaluator ev;
  ev.scopes.emplace_back();
  List list;
  for (const auto& m : msgs) {
    Value d = Value::make_dict();
    d.dict->set("role", Value::str(m.role));
    d.dict->set("content", Value::str(m.content));
    list.push_back(d);
  }
  auto& g = ev.scopes.back();
  g["messages"] = Value::make_list(std::move(list));
  g["add_generation_prompt"] = Value::boolean(add_generation_prompt);
  g["bos_token"] = Value::str(bos_);
  g["eos_token"] = Value::str(eos_);
  ev.scopes.emplace_back();  // template-level assignments
  try {
    ev.exec(prog_->body);
  } catch (const BreakSignal&) {
    LW_FAIL("chat template: {% break %} outside a loop");
  } catch (const ContinueSignal&) {
    LW_FAIL("chat template: {% continue %} outside a loop");
  }
  return std::move(ev.out);
}

}  // namespace lw::text
