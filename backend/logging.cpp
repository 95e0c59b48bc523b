// The only file that includes spdlog. See Note [Logging].
#include "backend/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace lazyfuse {
namespace {

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

LogLevel logLevel() { return config::logLevel(); }

void logMessage(LogLevel level, const std::string& message) {
  logger().log(toSpdlog(level), "{}", message);
}

}  // namespace lazyfuse
