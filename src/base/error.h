// lw::Error and the checks every layer uses. A failed check throws lw::Error carrying the
// file:line of the check. The bottom layer: it includes nothing of lightwave's.
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
// "src/dir/file.cpp:line": the path from src/ on, so messages read the same on every machine.
std::string source_location(const char* file, int line);
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
