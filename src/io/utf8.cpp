#include "io/utf8.h"

#include <fmt/format.h>

#include "io/safetensors.h"

namespace fluxrt::io {

namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 when it is not valid.
size_t sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t len = 0;
  uint32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;  // continuation byte, overlong 2-byte lead (C0, C1) or F5..FF
  }
  if (text.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const unsigned char cc = byte(i + k);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if (len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
  if (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
  return len;
}

}  // namespace

bool is_valid_utf8(std::string_view text, size_t* bad_pos) {
  size_t i = 0;
  while (i < text.size()) {
    size_t len = sequence_length(text, i);
    if (len == 0) {
      if (bad_pos != nullptr) *bad_pos = i;
      return false;
    }
    i += len;
  }
  return true;
}

size_t utf8_length(std::string_view text) {
  size_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string escape_for_message(std::string_view text, size_t max_bytes) {
  std::string out;
  const bool cut = text.size() > max_bytes;
  if (cut) text = text.substr(0, max_bytes);
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c >= 0x80) {
      size_t len = sequence_length(text, i);
      if (len == 0) {
        out += fmt::format("\\x{:02x}", c);
      } else {
        out.append(text.substr(i, len));
        i += len;
        continue;
      }
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  if (cut) out += "...";
  return out;
}

std::string quote_name(std::string_view name) {
  // Built by appending: GCC 12 warns (falsely, -Wrestrict) on `"\"" + std::string`.
  std::string out(1, '"');
  out += escape_for_message(name);
  out += '"';
  return out;
}

}  // namespace fluxrt::io
