#include "text/template_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <utility>

#include "base/error.h"

namespace lw::text::jinja {

[[noreturn]] void syntax_error(int line, int col, const std::string& msg) {
  LW_FAIL("chat template syntax error at line " << line << " col " << col << ": " << msg);
}

namespace {

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
                if (q + n > src_.size() ||
                    !std::all_of(src_.begin() + q, src_.begin() + q + n, [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; }))
                  syntax_error(line, col, std::string("bad \\") + e + " escape: " + std::to_string(n) + " hex digits expected");
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

}  // namespace

std::vector<Piece> lex(std::string source) { return Lexer(std::move(source)).run(); }

}  // namespace lw::text::jinja
