#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"

namespace fluxrt {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("FLUXRT_LOG_LEVEL");
  if (!env) return LogLevel::Info;
  try {
    return parse_log_level(env);
  } catch (const Error&) {
    return LogLevel::Info;
  }
}

LogLevel& level_ref() {
  static LogLevel level = initial_level();
  return level;
}

std::mutex g_log_mutex;

}  // namespace

void set_log_level(LogLevel level) { level_ref() = level; }
LogLevel log_level() { return level_ref(); }

LogLevel parse_log_level(std::string_view text) {
  if (text == "trace") return LogLevel::Trace;
  if (text == "debug") return LogLevel::Debug;
  if (text == "info") return LogLevel::Info;
  if (text == "warn" || text == "warning") return LogLevel::Warn;
  if (text == "error") return LogLevel::Error;
  if (text == "off") return LogLevel::Off;
  fail(ErrorCode::InvalidArgument, "unknown log level '{}' (trace, debug, info, warn, error, off)",
       std::string(text));
}

void log_message(LogLevel level, std::string_view message) {
  static const char* kNames[] = {"trace", "debug", "info", "warn", "error", "off"};
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::fprintf(stderr, "[fluxrt %s] %.*s\n", kNames[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace fluxrt
