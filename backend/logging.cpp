// The only file that includes spdlog. See Note [Logging].
#include "backend/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>

namespace lazyfuse {
namespace {

LogLevel parseLevel(const char* text) {
  if (text == nullptr) return LogLevel::kWarn;
  if (std::strcmp(text, "debug") == 0 || std::strcmp(text, "trace") == 0) return LogLevel::kDebug;
  if (std::strcmp(text, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(text, "error") == 0) return LogLevel::kError;
  if (std::strcmp(text, "off") == 0) return LogLevel::kOff;
  return LogLevel::kWarn;
}

spdlog::level::level_enum toSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::warn;
}

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto existing = spdlog::get("lazyfuse");
    if (existing) return existing;
    auto created = spdlog::stderr_color_mt("lazyfuse");
    created->set_level(toSpdlog(logLevel()));
    created->set_pattern("[lazyfuse %^%l%$] %v");
    return created;
  }();
  return *instance;
}

}  // namespace

LogLevel logLevel() {
  static const LogLevel level = parseLevel(std::getenv("LAZYFUSE_LOG_LEVEL"));
  return level;
}

void logMessage(LogLevel level, const std::string& message) {
  logger().log(toSpdlog(level), "{}", message);
}

}  // namespace lazyfuse
