#include "text/template_eval.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <functional>
#include <initializer_list>
#include <map>
#include <utility>
#include <vector>

#include "base/error.h"

namespace lw::text::jinja {

namespace {

struct BreakSignal {};
// The longest range() (jinja2's sandbox, which transformers renders templates in, has the same).
constexpr int64_t kMaxRange = 100000;
// The longest string `str * int` makes.
constexpr uint64_t kMaxRepeatBytes = uint64_t{16} << 20;
struct ContinueSignal {};

// Bytes [pos, pos + n) of a string, with their marks.
Value substr(const Value& v, size_t pos, size_t n = std::string::npos) {
  Value r = Value::str(v.s.substr(pos, n));
  if (!v.from_message.empty()) r.from_message = v.from_message.substr(pos, n);
  return r;
}

// A string made from parts: all of it counts as message text when any part does.
Value derived(std::string s, std::initializer_list<const Value*> from) {
  bool marked = false;
  for (const Value* v : from) marked = marked || carries_message_text(*v);
  return Value::str(std::move(s), marked);
}

// The value as text (Python's str()), with its marks: a string's own, else all or nothing.
Value text_of(const Value& v) {
  if (v.t == Value::T::Str) return v;
  return derived(to_str(v), {&v});
}

Value concat(const Value& a, const Value& b) {
  Value r = text_of(a);
  append(r, text_of(b));
  return r;
}

class Evaluator {
 public:
  std::vector<std::unordered_map<std::string, Value>> scopes;
  Value out = Value::str("");

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
      case Node::Text: append(out, Value::str(n.text)); break;
      case Node::Output: append(out, text_of(eval(*n.expr))); break;
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
          // Values are never cyclic (printing and comparing them recurse): a namespace may not hold itself.
          std::vector<const void*> seen;
          if (holds(v, ns.dict.get(), seen)) fail(*n.expr, "'" + n.targets[0] + "' cannot hold itself");
          ns.dict->set(n.targets[1], std::move(v));
        }
        break;
      }
      case Node::Break: throw BreakSignal{};
      case Node::Continue: throw ContinueSignal{};
      case Node::For: exec_for(n); break;
    }
  }

  // Whether v is or contains the dict d (each container looked at once).
  static bool holds(const Value& v, const Dict* d, std::vector<const void*>& seen) {
    const void* p = v.t == Value::T::Dict ? static_cast<const void*>(v.dict.get())
                    : v.t == Value::T::List ? static_cast<const void*>(v.list.get())
                                            : nullptr;
    if (!p) return false;
    if (p == d) return true;
    if (std::find(seen.begin(), seen.end(), p) != seen.end()) return false;
    seen.push_back(p);
    if (v.t == Value::T::List) {
      for (const auto& x : *v.list)
        if (holds(x, d, seen)) return true;
    } else {
      for (const auto& [k, x] : v.dict->items)
        if (holds(x, d, seen)) return true;
    }
    return false;
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
          l.push_back(substr(v, k, len));
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
    if (obj.t == Value::T::List && !name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) {
      int64_t k = 0;
      const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), k);
      return ec == std::errc() && end == name.data() + name.size() ? get_index(obj, Value::integer(k), at) : Value{};
    }
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
      return obj.t == Value::T::List ? (*obj.list)[k] : substr(obj, size_t(k), 1);
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
        if (v.t == Value::T::Int && v.i == INT64_MIN) fail(e, "integer overflow");
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
    Value s = Value::str("");
    for (int64_t k = a; step > 0 ? k < b : k > b;) {
      if (obj.t == Value::T::List) l.push_back((*obj.list)[k]);
      else append(s, substr(obj, size_t(k), 1));
      if (__builtin_add_overflow(k, step, &k)) break;
    }
    return obj.t == Value::T::List ? Value::make_list(std::move(l)) : s;
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
    if (op == "~") return concat(a, b);
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c;
      if (a.is_num() && b.is_num()) c = a.num() < b.num() ? -1 : a.num() > b.num() ? 1 : 0;
      else if (a.t == Value::T::Str && b.t == Value::T::Str) c = a.s.compare(b.s);
      else fail(e, "cannot compare " + type_name(a) + " and " + type_name(b));
      bool r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
      return Value::boolean(r);
    }
    if (op == "+") {
      if (a.t == Value::T::Str && b.t == Value::T::Str) return concat(a, b);
      if (a.t == Value::T::List && b.t == Value::T::List) {
        List l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(l));
      }
    }
    if (op == "*" && a.t == Value::T::Str && b.t == Value::T::Int) {
      if (b.i > 0 && a.s.size() > kMaxRepeatBytes / static_cast<uint64_t>(b.i))
        fail(e, "a repeated string of more than " + std::to_string(kMaxRepeatBytes) + " bytes");
      Value s = Value::str("");
      for (int64_t k = 0; k < b.i; ++k) append(s, a);
      return s;
    }
    if (!a.is_num() || !b.is_num())
      fail(e, "unsupported operand types for " + op + ": " + type_name(a) + " and " + type_name(b));
    bool fl = a.t == Value::T::Float || b.t == Value::T::Float;
    // The integer operands (bool as 0 or 1); only read when neither operand is a float.
    int64_t x = a.t == Value::T::Int ? a.i : fl ? 0 : int64_t(a.num()), y = b.t == Value::T::Int ? b.i : fl ? 0 : int64_t(b.num());
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
      if (x == INT64_MIN && y == -1) fail(e, "integer overflow");
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return op == "//" ? Value::integer(q) : Value::integer(x - q * y);
    }
    if (op == "**") {
      if (!fl && y >= 0) {
        int64_t r = 1, base = x;  // by squaring, every product checked
        for (int64_t n = y; n > 0;) {
          if ((n & 1) && __builtin_mul_overflow(r, base, &r)) fail(e, "integer overflow");
          n >>= 1;
          if (n > 0 && __builtin_mul_overflow(base, base, &base)) fail(e, "integer overflow");
        }
        return Value::integer(r);
      }
      return Value::real(std::pow(a.num(), b.num()));
    }
    if (fl) {
      double r = op == "+" ? a.num() + b.num() : op == "-" ? a.num() - b.num() : a.num() * b.num();
      return Value::real(r);
    }
    int64_t r = 0;
    const bool over = op == "+" ? __builtin_add_overflow(x, y, &r)
                      : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                  : __builtin_mul_overflow(x, y, &r);
    if (over) fail(e, "integer overflow");
    return Value::integer(r);
  }

  Value kwarg(const Expr& e, const std::string& name, size_t pos, Value def) {
    for (const auto& [k, v] : e.kwargs)
      if (k == name) return eval(*v);
    if (pos < e.args.size()) return eval(*e.args[pos]);
    return def;
  }

  static Value strip(const Value& v, const std::string& chars, bool left, bool right) {
    const std::string& s = v.s;
    size_t a = 0, b = s.size();
    auto in = [&](char c) { return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0 : chars.find(c) != std::string::npos; };
    if (left) while (a < b && in(s[a])) ++a;
    if (right) while (b > a && in(s[b - 1])) --b;
    return substr(v, a, b - a);
  }

  // The string with each byte changed by f (the length and the marks stay).
  template <class F>
  static Value map_bytes(Value v, F f) {
    for (size_t k = 0; k < v.s.size(); ++k) v.s[k] = f(k, static_cast<unsigned char>(v.s[k]));
    return v;
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
          return strip(obj, c.t == Value::T::Str ? c.s : "", m != "rstrip", m != "lstrip");
        }
        if (m == "upper" || m == "lower")
          return map_bytes(obj, [&](size_t, unsigned char ch) { return char(m == "upper" ? std::toupper(ch) : std::tolower(ch)); });
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
            for (size_t f; (f = s.find(sep.s, pos)) != std::string::npos; pos = f + sep.s.size()) l.push_back(substr(obj, pos, f - pos));
            l.push_back(substr(obj, pos));
          } else {
            size_t k = 0;
            while (k < s.size()) {
              while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
              size_t st = k;
              while (k < s.size() && !std::isspace(static_cast<unsigned char>(s[k]))) ++k;
              if (k > st) l.push_back(substr(obj, st, k - st));
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
          return derived(r + s.substr(pos), {&obj, &a, &b});
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
      // The item count in 128-bit arithmetic (no overflow), capped as jinja2's sandbox does.
      const __int128 span = step > 0 ? __int128(hi) - lo : __int128(lo) - hi;
      const __int128 count = span <= 0 ? 0 : (span - 1) / (step > 0 ? __int128(step) : -__int128(step)) + 1;
      if (count > kMaxRange) fail(e, "range of more than " + std::to_string(kMaxRange) + " items");
      List l;
      for (int64_t k = 0; k < int64_t(count); ++k) l.push_back(Value::integer(int64_t(lo + __int128(k) * step)));
      return Value::make_list(std::move(l));
    }
    if (f.s == "strftime_now") {
      Value fmt = kwarg(e, "format", 1, Value::str("%Y-%m-%d"));
      std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof(buf), to_str(fmt).c_str(), &tm);
      return derived(std::string(buf, n), {&fmt});
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
      return strip(text_of(v), c.t == Value::T::Str ? c.s : "", true, true);
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
      return derived(std::move(out), {&v});
    }
    if (f == "upper" || f == "lower" || f == "capitalize") {
      return map_bytes(text_of(v), [&](size_t k, unsigned char c) {
        bool up = f == "upper" || (f == "capitalize" && k == 0);
        return up ? char(std::toupper(c)) : char(std::tolower(c));
      });
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
      Value out = Value::str("");
      List l = iterate(v, e);
      for (size_t k = 0; k < l.size(); ++k) {
        if (k) append(out, text_of(sep));
        append(out, text_of(attr.defined() ? get_attr(l[k], to_str(attr), e) : l[k]));
      }
      return out;
    }
    if (f == "items") {
      if (v.t == Value::T::Undefined) return Value::make_list();
      if (v.t != Value::T::Dict) fail(e, "items of " + type_name(v));
      List l;
      for (const auto& [k, x] : v.dict->items) l.push_back(Value::make_list({Value::str(k), x}));
      return Value::make_list(std::move(l));
    }
    if (f == "list") return Value::make_list(iterate(v, e));
    if (f == "string") return text_of(v);
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
      return derived(r + s.substr(pos), {&v, &a, &b});
    }
    fail(e, "unknown filter '" + f + "'");
  }
};

}  // namespace

std::string evaluate(const Body& body, Globals globals, std::string* from_message) {
  Evaluator ev;
  ev.scopes.push_back(std::move(globals));
  ev.scopes.emplace_back();  // template-level assignments
  try {
    ev.exec(body);
  } catch (const BreakSignal&) {
    LW_FAIL("chat template: {% break %} outside a loop");
  } catch (const ContinueSignal&) {
    LW_FAIL("chat template: {% continue %} outside a loop");
  }
  if (from_message) {
    *from_message = std::move(ev.out.from_message);
    if (!from_message->empty()) from_message->resize(ev.out.s.size(), 0);
  }
  return std::move(ev.out.s);
}

}  // namespace lw::text::jinja
