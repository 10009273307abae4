#include "gpu/error.h"

namespace lw::detail {

namespace {
std::string location(const char* file, int line) {
  std::string f = file;
  // Keep the path from src/ on, so messages read the same on every machine.
  if (auto pos = f.rfind("/src/"); pos != std::string::npos) f = f.substr(pos + 1);
  return f + ":" + std::to_string(line);
}
}  // namespace

void throw_error(const char* file, int line, const std::string& message) {
  throw Error(message + " [" + location(file, line) + "]");
}

void throw_vendor_error(const char* file, int line, const char* call, const char* vendor, const std::string& code,
                        const std::string& message) {
  throw Error(std::string(vendor) + " error " + code + " (" + message + ") in " + call + " [" + location(file, line) +
              "]");
}

}  // namespace lw::detail
