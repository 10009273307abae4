#include "core/logging.h"

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace lw {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("lightwave");
    const char* env = std::getenv("LW_LOG_LEVEL");
    spdlog::level::level_enum level = spdlog::level::warn;
    if (env && *env) {
      level = spdlog::level::from_str(env);
      // from_str maps unknown names to "off"; say so instead of going silent.
      if (level == spdlog::level::off && std::string(env) != "off") {
        level = spdlog::level::warn;
        l->warn("LW_LOG_LEVEL='{}' is not a level (trace, debug, info, warn, error, critical, off); using warn", env);
      }
    }
    l->set_level(level);
    l->set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
    return l;
  }();
  return *logger;
}

}  // namespace lw
