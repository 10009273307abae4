// The chat-template evaluator (internal to text/): runs a parsed template over global variables
// and returns the text. Implements the statements (if, for with loop.* and else, set, namespace
// attributes, break/continue), the operators, the globals raise_exception, namespace, range and
// strftime_now, and the filters, tests and str/list/dict methods the models' templates use.
#pragma once
#include <string>
#include <unordered_map>

#include "text/template_parser.h"
#include "text/template_value.h"

namespace lw::text::jinja {

using Globals = std::unordered_map<std::string, Value>;

// Renders body with the given globals; raise_exception and evaluation errors are lw::Error
// naming the template line and column. from_message (may be null) receives the output's
// marks: empty when no byte came from a marked string, else one flag per byte (1: message text).
std::string evaluate(const Body& body, Globals globals, std::string* from_message = nullptr);

}  // namespace lw::text::jinja
