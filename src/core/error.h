#pragma once
// One exception type for the whole engine (DESIGN.md section 4). Messages name the op, tensor or
// file involved; the CLI prints them on one line, the server maps the code to an HTTP status.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace fluxrt {

enum class ErrorCode {
  InvalidArgument,
  NotFound,
  Format,
  Unsupported,
  Io,
  OutOfMemory,
  Device,
  Internal,
  Cancelled,  // the caller asked to stop (Ctrl-C, a cancelled server request)
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message) : std::runtime_error(std::move(message)), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace fluxrt

// Checks at API and op boundaries; always on, because they guard user input.
#define FLUXRT_CHECK(cond, code, ...)                      \
  do {                                                     \
    if (!(cond)) ::fluxrt::fail((code), __VA_ARGS__);      \
  } while (0)

// Internal invariants on hot paths; compiled out of release builds. Never for user input.
#ifdef NDEBUG
#define FLUXRT_DCHECK(cond) ((void)0)
#else
#define FLUXRT_DCHECK(cond)                                                                       \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      ::fluxrt::fail(::fluxrt::ErrorCode::Internal, "internal check failed: {} ({}:{})", #cond, \
                     __FILE__, __LINE__);                                                         \
  } while (0)
#endif
