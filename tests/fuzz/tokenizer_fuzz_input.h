#pragma once
// What the tokenizer fuzzers (fuzz_*_tokenizer.cpp) share: how one fuzz input becomes a text and
// the options of the call, and the checks every target makes on a failure.
//
// Input layout: one control byte, then the text (any bytes: invalid UTF-8 must be refused).
//   bits 0-1  max length: 0 the family's default, 1 byte 1 + 1 (1..256, short enough that real
//             prompts are cut), 2 bytes 1-4 as a little-endian int32 (anything, so the range
//             check is fuzzed too), 3 bits 2-4 + 1 (1..8: the smallest lengths)
//   0xFF      (the whole byte) the text is repeated up to kMaxTiledCharacters, which reaches the
//             long-input paths (heap merges, long regex runs, long runs of combining marks) from
//             a short input. Such inputs take seconds in the instrumented build: one control
//             byte in 256 asks for them, so that they do not take most of the run.
// Modes 1 and 2 read their length bytes right after the control byte; the text follows. The seeds
// in tests/data/tokenizers/fuzz/seeds/ are written in this layout (tests/data/tokenizers/fuzz/README.md).
#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.h"
#include "fuzz_check.h"
#include "tokenizers/text_stages.h"

namespace fluxrt::fuzz {

// The server's prompt limit (apps/server/api.h, max_prompt_chars): the longest text it tokenizes.
inline constexpr size_t kMaxTiledCharacters = 32000;

struct TokenizerFuzzInput {
  std::string text;
  int max_length = 0;
};

inline TokenizerFuzzInput read_tokenizer_fuzz_input(const uint8_t* data, size_t size, int default_length) {
  TokenizerFuzzInput input;
  input.max_length = default_length;
  if (size == 0) return input;
  const uint8_t control = data[0];
  size_t pos = 1;
  switch (control & 3) {
    case 0:
      break;
    case 1:
      if (pos < size) input.max_length = data[pos++] + 1;
      break;
    case 2:
      if (size - pos >= 4) {
        uint32_t raw = 0;
        std::memcpy(&raw, data + pos, 4);
        pos += 4;
        input.max_length = static_cast<int>(raw);
      }
      break;
    default:
      input.max_length = ((control >> 2) & 7) + 1;
      break;
  }
  const std::string_view once(reinterpret_cast<const char*>(data + pos), size - pos);
  // Characters counted as the bytes that do not continue a UTF-8 sequence.
  const size_t characters = static_cast<size_t>(std::count_if(
      once.begin(), once.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
  size_t copies = 1;
  if (control == 0xFF && characters > 0) copies = std::max<size_t>(1, kMaxTiledCharacters / characters);
  input.text.reserve(once.size() * copies);
  for (size_t i = 0; i < copies; ++i) input.text.append(once);
  return input;
}

// NFC of valid UTF-8 by the tokenizers' own normaliser (fuzz_qwen_tokenizer checks it against
// utf8proc_map on short texts; utf8proc_map takes quadratic time on long runs of marks).
inline std::string nfc(std::string_view text) {
  std::string out;
  return tokenizers::normalize_unicode(text, tokenizers::Normalization::Nfc, out) ? out : std::string(text);
}

// utf8proc_map's result for `form`, the reference normalize_unicode must agree with.
inline std::string utf8proc_normalized(std::string_view text, tokenizers::Normalization form) {
  using tokenizers::Normalization;
  int options = UTF8PROC_STABLE;
  if (form == Normalization::Nfc || form == Normalization::Nfkc) options |= UTF8PROC_COMPOSE;
  if (form == Normalization::Nfd || form == Normalization::Nfkd) options |= UTF8PROC_DECOMPOSE;
  if (form == Normalization::Nfkc || form == Normalization::Nfkd) options |= UTF8PROC_COMPAT;
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                          static_cast<utf8proc_option_t>(options));
  std::string out =
      n < 0 ? std::string() : std::string(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  std::free(mapped);
  return out;
}

// `text` without the characters of the Unicode White_Space property (what the CLIP and T5
// pre-tokenizers split on and drop).
inline std::string without_white_space(std::string_view text) {
  std::string out;
  utf8proc_int32_t cp = 0;
  for (size_t i = 0; i < text.size();) {
    const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                                static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    const size_t step = n > 0 ? static_cast<size_t>(n) : 1;
    const bool space = (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
                       (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
                       cp == 0x205F || cp == 0x3000;
    if (n <= 0 || !space) out.append(text.substr(i, step));
    i += step;
  }
  return out;
}

// A refusal must be the documented one (InvalidArgument) and fit on one line, as messages go
// into logs and HTTP error bodies; `expected` says whether this input may be refused at all.
inline void check_refusal(const Error& e, bool expected) {
  if (!expected) {
    std::fprintf(stderr, "tokenizer fuzz: unexpected error: %s\n", e.what());
    invariant_failed("an input that is valid was refused");
  }
  FUZZ_CHECK(e.code() == ErrorCode::InvalidArgument);
  FUZZ_CHECK(std::strchr(e.what(), '\n') == nullptr && std::strchr(e.what(), '\r') == nullptr);
}

}  // namespace fluxrt::fuzz
