#pragma once
// Added tokens (<|im_start|>, <think>, ...): whole strings that are cut out of the input before
// normalisation and pre-tokenisation and map straight to their ids, as the Hugging Face tokenizer's
// added vocabulary does (leftmost match first, the longest one at that position).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fluxrt::tokenizers {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;      // only informs decoding/reporting; special or not, it is atomic
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // matched in normalised text instead of the raw input
};

// One piece of the input after added-token splitting: either an added token or plain text.
struct TextSegment {
  std::string_view text;  // empty for a token
  int32_t token_id = -1;  // >= 0 for a token
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // Splits `text` (valid UTF-8) around every match; plain-text segments are never empty.
  void split(std::string_view text, std::vector<TextSegment>& out) const;
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t token = -1;  // index into tokens_ when a token ends here
  };
  // Longest token that starts exactly at `pos`; returns its index or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;
  bool accept(const AddedToken& token, std::string_view text, size_t start, size_t end) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace fluxrt::tokenizers
