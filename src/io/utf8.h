#pragma once
// UTF-8 validation and escaping for error messages. Names in checkpoints come from files we do
// not control; before one goes into a message it is escaped, so a message is always one line.
#include <cstddef>
#include <string>
#include <string_view>

namespace fluxrt::io {

// Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF). On failure, *bad_pos
// (when given) receives the offset of the first byte of the first invalid sequence.
bool is_valid_utf8(std::string_view text, size_t* bad_pos = nullptr);

// Code points in valid UTF-8 text (bytes that do not continue a sequence).
size_t utf8_length(std::string_view text);

// Escapes control bytes, backslashes, quotes and invalid UTF-8 (\n, \\, \", \xff); valid
// multi-byte characters pass through. Texts longer than `max_bytes` are cut with "...".
std::string escape_for_message(std::string_view text, size_t max_bytes = 200);

}  // namespace fluxrt::io
