#pragma once
// A small pull parser for the large parts of tokenizer files (a 150k-entry vocab object, a 150k-entry
// merges array). nlohmann::json builds a std::map per object, which takes hundreds of milliseconds
// on these files; streaming the entries straight into the tokenizer's tables takes a few. Small
// subtrees (added tokens, normalizer, pre-tokenizer) are cut out with raw_value() and handed to
// nlohmann::json.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fluxrt::tokenizers {

class JsonReader {
 public:
  // `label` names the file in error messages.
  JsonReader(std::string_view text, std::string_view label) : text_(text), label_(label) {}

  // Next non-whitespace character without consuming it; '\0' at the end of the input.
  char peek();
  // Consumes `c` (after whitespace) or throws ErrorCode::Format.
  void expect(char c);

  // Object iteration: call begin_object() once, then next_key() until it returns false.
  void begin_object();
  bool next_key(std::string_view& key);
  // Array iteration: begin_array() once, then next_element() until it returns false; the element
  // itself is then read by the caller.
  void begin_array();
  bool next_element();

  // A JSON string. The view points into the input when the string has no escapes, otherwise into
  // an internal buffer that the next read_string() overwrites.
  std::string_view read_string();
  // A second independent buffer, for when two strings must be alive at once (merge pairs).
  std::string_view read_string_alt();
  int64_t read_int();
  bool read_bool();
  bool consume_null();  // true (and consumed) when the next value is `null`
  // Skips one value of any type and returns its raw text.
  std::string_view raw_value();

  // True when `view` points into the input (rather than a string buffer that the next read reuses).
  bool in_input(std::string_view view) const {
    return view.data() >= text_.data() && view.data() + view.size() <= text_.data() + text_.size();
  }
  size_t position() const { return pos_; }
  [[noreturn]] void error(std::string_view what) const;

 private:
  void skip_ws();
  std::string_view read_string_into(std::string& buffer);
  void skip_string();

  std::string_view text_;
  std::string_view label_;
  size_t pos_ = 0;
  bool first_ = true;  // first member/element of the innermost container being iterated
  std::string buffer_;
  std::string buffer_alt_;
};

}  // namespace fluxrt::tokenizers
