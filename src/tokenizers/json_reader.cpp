#include "tokenizers/json_reader.h"

#include <bit>
#include <cstring>

#include "core/error.h"
#include "tokenizers/byte_level.h"

namespace fluxrt::tokenizers {

void JsonReader::error(std::string_view what) const {
  fail(ErrorCode::Format, "{}: malformed JSON at byte {}: {}", label_, pos_, what);
}

void JsonReader::skip_ws() {
  // Pretty-printed files (tokenizer.json from save_pretrained) are mostly indentation.
  const char* p = text_.data() + pos_;
  const char* end = text_.data() + text_.size();
  while (p < end) {
    const char c = *p;
    if (std::endian::native == std::endian::little && c == ' ' && p + 8 <= end) {
      // A run of indentation: find its end eight bytes at a time.
      uint64_t word;
      std::memcpy(&word, p, 8);
      const uint64_t other = word ^ 0x2020202020202020ULL;  // zero bytes are spaces
      if (other == 0) {
        p += 8;
      } else {
        p += __builtin_ctzll(other) / 8;  // little-endian: the lowest set bit is the first non-space
      }
      continue;
    }
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
    ++p;
  }
  pos_ = static_cast<size_t>(p - text_.data());
}

char JsonReader::peek() {
  skip_ws();
  return pos_ < text_.size() ? text_[pos_] : '\0';
}

void JsonReader::expect(char c) {
  if (peek() != c) error(std::string("expected '") + c + "'");
  ++pos_;
}

void JsonReader::begin_object() {
  expect('{');
  first_ = true;
}

bool JsonReader::next_key(std::string_view& key) {
  char c = peek();
  if (c == '}') {
    ++pos_;
    first_ = false;
    return false;
  }
  if (!first_) {
    if (c != ',') error("expected ',' or '}'");
    ++pos_;
  }
  first_ = false;
  key = read_string();
  expect(':');
  return true;
}

void JsonReader::begin_array() {
  expect('[');
  first_ = true;
}

bool JsonReader::next_element() {
  char c = peek();
  if (c == ']') {
    ++pos_;
    first_ = false;
    return false;
  }
  if (!first_) {
    if (c != ',') error("expected ',' or ']'");
    ++pos_;
  }
  first_ = false;
  return true;
}

std::string_view JsonReader::read_string() { return read_string_into(buffer_); }
std::string_view JsonReader::read_string_alt() { return read_string_into(buffer_alt_); }

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view JsonReader::read_string_into(std::string& buffer) {
  expect('"');
  const size_t start = pos_;
  // Fast path: no escapes, the view points into the input.
  const void* quote = std::memchr(text_.data() + pos_, '"', text_.size() - pos_);
  if (!quote) error("unterminated string");
  size_t end = static_cast<const char*>(quote) - text_.data();
  if (!std::memchr(text_.data() + start, '\\', end - start)) {
    pos_ = end + 1;
    return text_.substr(start, end - start);
  }
  buffer.clear();
  auto read_hex4 = [&]() -> char32_t {
    if (pos_ + 4 > text_.size()) error("truncated \\u escape");
    char32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      int h = hex_value(text_[pos_ + i]);
      if (h < 0) error("bad \\u escape");
      v = (v << 4) | static_cast<char32_t>(h);
    }
    pos_ += 4;
    return v;
  };
  while (true) {
    if (pos_ >= text_.size()) error("unterminated string");
    char c = text_[pos_++];
    if (c == '"') break;
    if (c != '\\') {
      buffer.push_back(c);
      continue;
    }
    if (pos_ >= text_.size()) error("unterminated string");
    char e = text_[pos_++];
    switch (e) {
      case '"': buffer.push_back('"'); break;
      case '\\': buffer.push_back('\\'); break;
      case '/': buffer.push_back('/'); break;
      case 'b': buffer.push_back('\b'); break;
      case 'f': buffer.push_back('\f'); break;
      case 'n': buffer.push_back('\n'); break;
      case 'r': buffer.push_back('\r'); break;
      case 't': buffer.push_back('\t'); break;
      case 'u': {
        char32_t cp = read_hex4();
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          // A high surrogate must be followed by an escaped low surrogate.
          if (pos_ + 2 > text_.size() || text_[pos_] != '\\' || text_[pos_ + 1] != 'u') error("lone surrogate");
          pos_ += 2;
          char32_t low = read_hex4();
          if (low < 0xDC00 || low > 0xDFFF) error("bad surrogate pair");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          error("lone surrogate");
        }
        append_utf8(buffer, cp);
        break;
      }
      default: error("bad escape");
    }
  }
  return buffer;
}

void JsonReader::skip_string() {
  expect('"');
  while (true) {
    if (pos_ >= text_.size()) error("unterminated string");
    char c = text_[pos_++];
    if (c == '"') return;
    if (c == '\\') ++pos_;
  }
}

int64_t JsonReader::read_int() {
  skip_ws();
  size_t start = pos_;
  bool negative = false;
  if (pos_ < text_.size() && text_[pos_] == '-') {
    negative = true;
    ++pos_;
  }
  int64_t value = 0;
  size_t digits = 0;
  while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
    if (value > (int64_t{1} << 53)) error("integer too large");
    value = value * 10 + (text_[pos_++] - '0');
    ++digits;
  }
  if (digits == 0) {
    pos_ = start;
    error("expected an integer");
  }
  if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
    error("expected an integer, got a fraction");
  }
  return negative ? -value : value;
}

bool JsonReader::read_bool() {
  skip_ws();
  if (text_.substr(pos_, 4) == "true") {
    pos_ += 4;
    return true;
  }
  if (text_.substr(pos_, 5) == "false") {
    pos_ += 5;
    return false;
  }
  error("expected true or false");
}

bool JsonReader::consume_null() {
  skip_ws();
  if (text_.substr(pos_, 4) == "null") {
    pos_ += 4;
    return true;
  }
  return false;
}

std::string_view JsonReader::raw_value() {
  skip_ws();
  const size_t start = pos_;
  int depth = 0;
  while (true) {
    if (pos_ >= text_.size()) {
      if (depth == 0 && pos_ > start) break;
      error("unexpected end of input");
    }
    char c = text_[pos_];
    if (c == '"') {
      skip_string();
      if (depth == 0) break;
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (depth == 0) break;  // end of a scalar inside the enclosing container
      if (--depth == 0) {
        ++pos_;
        break;
      }
    } else if (depth == 0 && (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
      break;
    }
    ++pos_;
  }
  if (pos_ == start) error("expected a value");
  // The caller continues with the enclosing container, which now has at least one entry.
  first_ = false;
  return text_.substr(start, pos_ - start);
}

}  // namespace fluxrt::tokenizers
