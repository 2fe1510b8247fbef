#pragma once
// The library's side of fluxrt::Error (defined in the public include/fluxrt/error.h, so callers
// catch the type thrown here): fail() and the FLUXRT_CHECK / FLUXRT_DCHECK macros that format
// the one-line message.
#include <fmt/format.h>

#include <string>
#include <utility>

#include "fluxrt/error.h"

namespace fluxrt {

template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

// The same for a rejected request input: `field` names the GenerateRequest member (Error::field).
template <typename... Args>
[[noreturn]] void fail_field(const char* field, ErrorCode code, fmt::format_string<Args...> format,
                             Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...), field);
}

}  // namespace fluxrt

// Checks at API and op boundaries; always on, because they guard user input.
#define FLUXRT_CHECK(cond, code, ...)                      \
  do {                                                     \
    if (!(cond)) ::fluxrt::fail((code), __VA_ARGS__);      \
  } while (0)

// A check on one request input, naming it for the caller (Error::field).
#define FLUXRT_CHECK_FIELD(cond, code, field, ...)                   \
  do {                                                               \
    if (!(cond)) ::fluxrt::fail_field((field), (code), __VA_ARGS__); \
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
