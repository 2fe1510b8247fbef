#pragma once
// Logging to stderr. Levels: error, warn, info (default), debug, trace. FLUXRT_LOG_LEVEL overrides.
#include <fmt/format.h>

#include <string_view>

namespace fluxrt {

enum class LogLevel { Trace, Debug, Info, Warn, Error, Off };

void set_log_level(LogLevel level);
LogLevel log_level();
// Parses "trace|debug|info|warn|error|off"; throws InvalidArgument otherwise.
LogLevel parse_log_level(std::string_view text);
void log_message(LogLevel level, std::string_view message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (level < log_level()) return;
  log_message(level, fmt::format(format, std::forward<Args>(args)...));
}

#define FLUXRT_LOG_DEBUG(...) ::fluxrt::log(::fluxrt::LogLevel::Debug, __VA_ARGS__)
#define FLUXRT_LOG_INFO(...) ::fluxrt::log(::fluxrt::LogLevel::Info, __VA_ARGS__)
#define FLUXRT_LOG_WARN(...) ::fluxrt::log(::fluxrt::LogLevel::Warn, __VA_ARGS__)
#define FLUXRT_LOG_ERROR(...) ::fluxrt::log(::fluxrt::LogLevel::Error, __VA_ARGS__)

}  // namespace fluxrt
