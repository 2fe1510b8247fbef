#include "tokenizers/added_tokens.h"

#include <utf8proc.h>

#include "tokenizers/byte_level.h"

namespace fluxrt::tokenizers {

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& content = tokens_[t].content;
    if (content.empty()) continue;  // an empty token can never match
    int32_t node = 0;
    for (unsigned char c : content) {
      int32_t child = -1;
      for (auto& [byte, index] : nodes_[node].children) {
        if (byte == c) child = index;
      }
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace_back(c, child);
        nodes_.emplace_back();
      }
      node = child;
    }
    // With duplicate contents the first declared token wins.
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
    first_byte_[static_cast<unsigned char>(content[0])] = true;
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& length) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    int32_t child = -1;
    for (const auto& [byte, index] : nodes_[node].children) {
      if (byte == c) {
        child = index;
        break;
      }
    }
    if (child < 0) break;
    node = child;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      length = i + 1 - pos;
    }
  }
  return best;
}

// Rust's char::is_whitespace and char::is_alphanumeric, which the reference uses for lstrip/rstrip
// and single_word, correspond to the Unicode White_Space property and to letters plus numbers.
static bool is_unicode_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

static bool is_word_char(char32_t c) {
  if (c == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// Code point that ends just before `pos`.
static char32_t code_point_before(std::string_view text, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return next_code_point(text, start);
}

bool AddedTokenMatcher::accept(const AddedToken& token, std::string_view text, size_t start, size_t end) const {
  if (!token.single_word) return true;
  if (start > 0 && is_word_char(code_point_before(text, start))) return false;
  if (end < text.size()) {
    size_t pos = end;
    if (is_word_char(next_code_point(text, pos))) return false;
  }
  return true;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>& out) const {
  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t length = 0;
    int32_t index = longest_at(text, pos, length);
    if (index < 0 || !accept(tokens_[index], text, pos, pos + length)) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t cut_start = pos, cut_end = pos + length;
    if (token.lstrip) {
      while (cut_start > plain_start) {
        size_t before = cut_start - 1;
        while (before > plain_start && (static_cast<unsigned char>(text[before]) & 0xC0) == 0x80) --before;
        size_t probe = before;
        if (!is_unicode_space(next_code_point(text, probe))) break;
        cut_start = before;
      }
    }
    if (token.rstrip) {
      while (cut_end < text.size()) {
        size_t probe = cut_end;
        if (!is_unicode_space(next_code_point(text, probe))) break;
        cut_end = probe;
      }
    }
    if (cut_start > plain_start) out.push_back({text.substr(plain_start, cut_start - plain_start), -1});
    out.push_back({{}, token.id});
    pos = plain_start = cut_end;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start), -1});
}

}  // namespace fluxrt::tokenizers
