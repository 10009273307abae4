// Vendor-call failures as lw::Error: the file:line of the call and the vendor's own error name
// and message (the checks themselves are in gpu/runtime.h).
#pragma once
#include <string>

#include "base/error.h"

namespace lw::detail {
[[noreturn]] void throw_vendor_error(const char* file, int line, const char* call, const char* vendor,
                                     const std::string& code, const std::string& message);
}  // namespace lw::detail
