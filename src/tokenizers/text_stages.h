#pragma once
// The text stages in front of a BPE model: Unicode normalisation (utf8proc) and the regex split of the
// pre-tokenizer (PCRE2 with Unicode properties, JIT-compiled when the platform allows).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fluxrt::tokenizers {

enum class Normalization { None, Nfc, Nfd, Nfkc, Nfkd };

// Returns true and fills `out` when normalisation changed something; false when `text` is already
// in the requested form (the common ASCII case costs one scan). `text` must be valid UTF-8.
bool normalize_unicode(std::string_view text, Normalization form, std::string& out);

// The Qwen2 pre-tokenizer pattern, as written in the model's tokenizer.json (Oniguruma syntax, which
// PCRE2 reads the same way for this pattern). Digits come out one at a time, letters with at most
// one leading non-letter, punctuation runs with one optional leading space, and `\s+(?!\S)` leaves
// the last space of a run for the word that follows.
inline constexpr std::string_view kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// The GPT-2 pattern used by ByteLevel pre-tokenizers with use_regex=true.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits text into the pieces a Hugging Face Split pre-tokenizer with behaviour "Isolated" yields:
// every match is a piece and so is every stretch between matches. Thread-safe after construction.
class RegexSplitter {
 public:
  // `label` names the tokenizer file in error messages.
  RegexSplitter(std::string_view pattern, std::string_view label);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces (views into `text`, never empty). `text` must be valid UTF-8.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string pattern_;
};

}  // namespace fluxrt::tokenizers
