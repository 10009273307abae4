#include "text/template_value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"

namespace lw::text::jinja {

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

bool carries_message_text(const Value& v) {
  switch (v.t) {
    case Value::T::Str: return v.from_message.find('\1') != std::string::npos;
    case Value::T::List:
      for (const auto& x : *v.list)
        if (carries_message_text(x)) return true;
      return false;
    case Value::T::Dict:
      for (const auto& [k, x] : v.dict->items)
        if (carries_message_text(x)) return true;
      return false;
    default: return false;
  }
}

void append(Value& dst, const Value& src) {
  if (!src.from_message.empty() || !dst.from_message.empty()) {
    dst.from_message.resize(dst.s.size(), 0);
    if (src.from_message.empty()) dst.from_message.append(src.s.size(), 0);
    else dst.from_message += src.from_message;
  }
  dst.s += src.s;
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

std::string to_str(const Value& v, bool repr) {
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

namespace {

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

}  // namespace

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

}  // namespace lw::text::jinja
