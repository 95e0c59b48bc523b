#pragma once

// Note [Logging]
// spdlog lives in backend/logging.cpp alone: torch ships fmt 12 headers and Debian's spdlog expects
// fmt 9, so no translation unit may see both. Everything else logs through this header, which
// depends on neither torch nor spdlog.

#include "lazy_ir/config.h"

#include <sstream>
#include <string>

namespace lazyfuse {

/// The level from LAZYFUSE_LOG_LEVEL (default warn), read once: config::logLevel().
LogLevel logLevel();
void logMessage(LogLevel level, const std::string& message);

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace lazyfuse

#define LF_LOG(level, ...)                                                      \
  do {                                                                          \
    if (::lazyfuse::logLevel() <= (level)) {                                    \
      ::lazyfuse::logMessage((level), ::lazyfuse::detail::concat(__VA_ARGS__)); \
    }                                                                           \
  } while (0)
#define LF_LOG_DEBUG(...) LF_LOG(::lazyfuse::LogLevel::kDebug, __VA_ARGS__)
#define LF_LOG_INFO(...) LF_LOG(::lazyfuse::LogLevel::kInfo, __VA_ARGS__)
#define LF_LOG_WARN(...) LF_LOG(::lazyfuse::LogLevel::kWarn, __VA_ARGS__)
