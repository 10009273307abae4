#include "gpu/error.h"

namespace lw::detail {

void throw_vendor_error(const char* file, int line, const char* call, const char* vendor, const std::string& code,
                        const std::string& message) {
  throw Error(std::string(vendor) + " error " + code + " (" + message + ") in " + call + " [" +
              source_location(file, line) + "]");
}

}  // namespace lw::detail
