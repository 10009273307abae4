// lw::Error and the checks every layer uses. A failed check throws lw::Error carrying the
// file:line of the check and, for vendor calls, the vendor's own error name and message.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace lw {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
[[noreturn]] void throw_vendor_error(const char* file, int line, const char* call, const char* vendor,
                                     const std::string& code, const std::string& message);
}  // namespace detail

}  // namespace lw

// LW_CHECK(cond, "message " << value << ...): throws lw::Error when cond is false.
#define LW_CHECK(cond, msg)                                              \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::ostringstream lw_check_os_;                                   \
      lw_check_os_ << msg;                                               \
      ::lw::detail::throw_error(__FILE__, __LINE__, lw_check_os_.str()); \
    }                                                                    \
  } while (0)

#define LW_FAIL(msg) LW_CHECK(false, msg)
