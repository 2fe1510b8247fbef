#include "tokenizers/byte_level.h"

namespace fluxrt::tokenizers {
namespace {

std::array<char32_t, 256> make_byte_to_unicode() {
  std::array<char32_t, 256> table{};
  char32_t next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    table[b] = printable ? static_cast<char32_t>(b) : next_extra++;
  }
  return table;
}

// The alphabet lives in U+0000..U+0143, so the inverse is a small dense table.
constexpr char32_t kAlphabetEnd = 0x144;

std::array<int16_t, kAlphabetEnd> make_unicode_to_byte() {
  std::array<int16_t, kAlphabetEnd> table{};
  table.fill(-1);
  const auto& forward = byte_to_unicode();
  for (int b = 0; b < 256; ++b) table[forward[b]] = static_cast<int16_t>(b);
  return table;
}

}  // namespace

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> table = make_byte_to_unicode();
  return table;
}

int unicode_to_byte(char32_t code_point) {
  static const std::array<int16_t, kAlphabetEnd> table = make_unicode_to_byte();
  return code_point < kAlphabetEnd ? table[code_point] : -1;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Length of the well-formed sequence starting at `pos`, or 0 when it is malformed.
static size_t utf8_sequence_length(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char c = byte(pos);
  if (c < 0x80) return 1;
  size_t n = s.size() - pos;
  auto cont = [&](size_t i) { return (byte(pos + i) & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return (n >= 2 && cont(1)) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (n < 3 || !cont(1) || !cont(2)) return 0;
    unsigned char c1 = byte(pos + 1);
    if (c == 0xE0 && c1 < 0xA0) return 0;   // overlong
    if (c == 0xED && c1 >= 0xA0) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (n < 4 || !cont(1) || !cont(2) || !cont(3)) return 0;
    unsigned char c1 = byte(pos + 1);
    if (c == 0xF0 && c1 < 0x90) return 0;  // overlong
    if (c == 0xF4 && c1 >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

size_t find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  const size_t size = text.size();
  while (pos < size) {
    // ASCII fast path, eight bytes at a time: prompts are mostly ASCII.
    while (pos + 8 <= size) {
      uint64_t chunk;
      __builtin_memcpy(&chunk, text.data() + pos, 8);
      if (chunk & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= size) break;
    size_t len = utf8_sequence_length(text, pos);
    if (len == 0) return pos;
    pos += len;
  }
  return std::string_view::npos;
}

char32_t next_code_point(std::string_view text, size_t& pos) {
  size_t len = utf8_sequence_length(text, pos);
  const auto byte = [&](size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(text[pos + i])); };
  char32_t cp;
  switch (len) {
    case 1: cp = byte(0); break;
    case 2: cp = ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F); break;
    case 3: cp = ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F); break;
    case 4:
      cp = ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6) | (byte(3) & 0x3F);
      break;
    default: pos += 1; return 0xFFFD;
  }
  pos += len;
  return cp;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& table = byte_to_unicode();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) append_utf8(out, table[c]);
  return out;
}

bool byte_level_to_bytes(std::string_view text, std::string& out) {
  size_t pos = 0;
  while (pos < text.size()) {
    int b = unicode_to_byte(next_code_point(text, pos));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace fluxrt::tokenizers
