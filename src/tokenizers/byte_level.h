#pragma once
// Byte-level helpers shared by the byte-level BPE tokenizers (Qwen2/Qwen3, GPT-2 style): the GPT-2
// byte-to-unicode alphabet, UTF-8 encoding/decoding and UTF-8 validation.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fluxrt::tokenizers {

// The GPT-2 alphabet: printable bytes 33..126, 161..172 and 174..255 stand for themselves; the other
// 68 bytes map, in increasing byte order, to U+0100, U+0101, ... (so " " -> U+0120 "Ġ", "\n" -> U+010A "Ċ").
const std::array<char32_t, 256>& byte_to_unicode();

// Inverse of byte_to_unicode(); -1 for a code point outside the alphabet.
int unicode_to_byte(char32_t code_point);

// Appends the UTF-8 encoding of a code point (<= U+10FFFF, not a surrogate).
void append_utf8(std::string& out, char32_t code_point);

// Decodes one code point at `pos` of valid UTF-8 and advances `pos`; returns U+FFFD and advances by
// one byte on malformed input, so callers that did not validate still terminate.
char32_t next_code_point(std::string_view text, size_t& pos);

// Offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF), or std::string_view::npos when the whole text is valid.
size_t find_invalid_utf8(std::string_view text);

// Raw bytes -> the byte-level string the vocabulary is written in.
std::string bytes_to_byte_level(std::string_view bytes);

// Byte-level string -> raw bytes. Returns false (and leaves `out` partly filled) when a character
// is outside the alphabet, e.g. for added tokens that are stored verbatim.
bool byte_level_to_bytes(std::string_view text, std::string& out);

}  // namespace fluxrt::tokenizers
