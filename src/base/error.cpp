#include "base/error.h"

namespace lw::detail {

std::string source_location(const char* file, int line) {
  std::string f = file;
  if (auto pos = f.rfind("/src/"); pos != std::string::npos) f = f.substr(pos + 1);
  return f + ":" + std::to_string(line);
}

void throw_error(const char* file, int line, const std::string& message) {
  throw Error(message + " [" + source_location(file, line) + "]");
}

}  // namespace lw::detail
