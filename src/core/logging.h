// Logging through spdlog. The level comes from LW_LOG_LEVEL (trace, debug, info, warn,
// error, critical, off; default warn) when the logger is first used.
#pragma once
#include <spdlog/spdlog.h>

namespace lw {

spdlog::logger& log();

}  // namespace lw
