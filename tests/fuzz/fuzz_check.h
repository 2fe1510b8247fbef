#pragma once
// What every fuzz target here checks with: an invariant that stops the run (libFuzzer then saves
// the input), the fuzzers' own UTF-8 validator and the one-line rule for messages. The validator is
// written here rather than taken from the library, so that a bug in the library's validator shows
// up as a refused valid input or an accepted bad one.
#include <cstdio>
#include <string_view>

namespace fluxrt::fuzz {

// Stops the run with a message naming the broken invariant; libFuzzer saves the input.
[[noreturn]] inline void invariant_failed(const char* what) {
  std::fprintf(stderr, "fuzz: invariant broken: %s\n", what);
  __builtin_trap();
}

#define FUZZ_CHECK(cond)                                  \
  do {                                                    \
    if (!(cond)) ::fluxrt::fuzz::invariant_failed(#cond); \
  } while (0)

// Whether `text` is well-formed UTF-8 (RFC 3629): no overlong forms, surrogates or code points
// above U+10FFFF.
inline bool is_valid_utf8(std::string_view text) {
  // Per sequence length: the payload bits of the lead byte, and the smallest code point that needs
  // that length (anything below is an overlong form).
  static constexpr char32_t kLeadBits[] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t length = lead < 0x80             ? 1
                          : (lead & 0xE0) == 0xC0 ? 2
                          : (lead & 0xF0) == 0xE0 ? 3
                          : (lead & 0xF8) == 0xF0 ? 4
                                                  : 0;
    if (length == 0 || text.size() - i < length) return false;
    char32_t cp = lead & kLeadBits[length];
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (next & 0x3F);
    }
    if (cp < kSmallest[length] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += length;
  }
  return true;
}

// Code points of valid UTF-8 text: the bytes that do not continue a sequence.
inline size_t code_points(std::string_view text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Messages go into logs, HTTP error bodies, Python exceptions and the CLI's stderr: one line, and
// UTF-8 (a value the user sent is escaped or cut on a character boundary, never mid-sequence).
inline bool is_one_line_message(std::string_view message) {
  return !message.empty() && message.find_first_of("\r\n") == std::string_view::npos &&
         is_valid_utf8(message);
}

}  // namespace fluxrt::fuzz
