// The value type of the chat-template interpreter (internal to text/): a JSON-like value
// (undefined, none, bool, int, float, str, list, dict, a global function's name) with
// Python's semantics for printing, truthiness and equality, and json.dumps for tojson.
// A string also records which of its bytes came from a message (`from_message`), so that the
// rendered prompt can tell the template's own markup from the text of the conversation.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lw::text::jinja {

struct Value;
using List = std::vector<Value>;
struct Dict;

struct Value {
  enum class T { Undefined, None, Bool, Int, Float, Str, List, Dict, Func } t = T::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // Str; Func: the global's name
  // Str: empty when no byte of `s` came from a message; else one flag per byte of `s`, 1 for
  // a byte of a message's role or content (carried through concatenation, slicing, strip,
  // split, case changes; an operation that rebuilds the text marks all of it).
  std::string from_message;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;

  static Value none() { Value v; v.t = T::None; return v; }
  static Value boolean(bool x) { Value v; v.t = T::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.t = T::Int; v.i = x; return v; }
  static Value real(double x) { Value v; v.t = T::Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.t = T::Str; v.s = std::move(x); return v; }
  // A string every byte of which came from a message (none when `from_message` is false).
  static Value str(std::string x, bool from_message) {
    Value v = str(std::move(x));
    if (from_message && !v.s.empty()) v.from_message.assign(v.s.size(), 1);
    return v;
  }
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

bool truthy(const Value& v);
// Whether any byte of the value came from a message: a marked string, or a list or dict holding
// one (dict keys are not marked).
bool carries_message_text(const Value& v);
// Appends src (a string) to dst (a string), with its marks.
void append(Value& dst, const Value& src);
// Python's repr of a float: the shortest digits that read back exactly, ".0" for integers.
std::string py_float(double d);
// Python's repr of a str: single quotes unless the string holds one and no double quote.
std::string py_repr_str(const std::string& s);
// Python's str() of the value (repr() inside containers, or with repr = true).
std::string to_str(const Value& v, bool repr = false);
// Python's json.dumps(v, ensure_ascii=False, indent=indent) (no indent when indent < 0),
// appended to out; depth is the nesting level of v.
void to_json(const Value& v, int indent, int depth, std::string& out);
// Python's ==: numbers compare by value across bool, int and float; containers element-wise.
bool equal(const Value& a, const Value& b);

}  // namespace lw::text::jinja
