#include "text/template_parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "base/error.h"

namespace lw::text::jinja {

namespace {

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

  // Statements and expressions nest at most kMaxNesting deep (the parser and the evaluator
  // recurse once per level: a deeper template is an error, not a stack overflow).
  static constexpr int kMaxNesting = 100;
  int depth_ = 0;
  struct Nest {
    Parser& p;
    explicit Nest(Parser& p) : p(p) {
      if (++p.depth_ > kMaxNesting) p.fail("nested more than " + std::to_string(kMaxNesting) + " levels deep");
    }
    ~Nest() { --p.depth_; }
  };

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
    Nest nest(*this);
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
    Nest nest(*this);
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
      Nest nest(*this);
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
      Nest nest(*this);
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
      auto e = mk(Expr::Lit, t);
      if (t.k == Tok::Int) {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (ec != std::errc() || end != t.text.data() + t.text.size()) fail("integer literal out of the 64-bit range");
        e->lit = Value::integer(v);
      } else {
        e->lit = Value::real(std::strtod(t.text.c_str(), nullptr));  // past the range: inf, as Python reads it
      }
      next();
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

}  // namespace

Body parse(std::vector<Piece> pieces) { return Parser(std::move(pieces)).parse_all(); }

}  // namespace lw::text::jinja
