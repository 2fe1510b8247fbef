#pragma once
// Byte-level BPE tokenizer (Qwen2 / Qwen3, the FLUX.2-klein text encoders), reproducing the Hugging
// Face `tokenizers` pipeline: added tokens cut out of the raw text, NFC normalisation, the regex
// split of the pre-tokenizer, the GPT-2 byte alphabet and BPE merges by rank.
//
// Two file layouts load into the same tokenizer:
//   tokenizer.json                                      (the `tokenizers` serialisation)
//   vocab.json + merges.txt [+ tokenizer_config.json]   (the Qwen2Tokenizer files; the config's
//                                                       added_tokens_decoder gives the added tokens)
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizers/added_tokens.h"
#include "tokenizers/text_stages.h"

namespace fluxrt::tokenizers {

class BpeModel;

// What a tokenizer_config.json adds beyond the vocabulary.
struct TokenizerConfig {
  std::string tokenizer_class;
  std::optional<std::string> pad_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> bos_token;
  std::optional<std::string> unk_token;
  std::optional<std::string> padding_side;     // "right" when absent (the transformers default)
  std::optional<std::string> truncation_side;  // likewise
  std::vector<AddedToken> added_tokens;     // from added_tokens_decoder
};

// Reads a tokenizer_config.json; fails with ErrorCode::Format naming the file when it is malformed.
TokenizerConfig read_tokenizer_config(const std::filesystem::path& path);

class BpeTokenizer {
 public:
  // A model folder (the pipeline's `tokenizer/`): tokenizer.json when present, otherwise
  // vocab.json + merges.txt; tokenizer_config.json is read in both cases when present (pad/eos
  // tokens, added tokens). ErrorCode::NotFound when neither layout is there.
  static BpeTokenizer from_directory(const std::filesystem::path& dir);
  // A tokenizer.json; `config` may be empty (no tokenizer_config.json).
  static BpeTokenizer from_tokenizer_json(const std::filesystem::path& tokenizer_json,
                                          const std::filesystem::path& config = {});
  // vocab.json + merges.txt with the Qwen2 pipeline (NFC, Qwen2 regex, byte level). `config` may be
  // empty; when given its tokenizer_class must be a Qwen2 tokenizer.
  static BpeTokenizer from_vocab_merges(const std::filesystem::path& vocab_json,
                                        const std::filesystem::path& merges_txt,
                                        const std::filesystem::path& config = {});

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

  // Token ids of `text`, no special tokens added (the Qwen tokenizer adds none). Added-token text
  // such as "<|im_end|>" becomes that token. Fails with ErrorCode::InvalidArgument when `text` is
  // not valid UTF-8. Thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int32_t>& out) const;  // appends

  // Bytes of the tokens (added tokens as their text); ErrorCode::InvalidArgument on unknown ids.
  // The result may be invalid UTF-8 when the ids cut a character in two.
  std::string decode(std::span<const int32_t> ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string_view id_to_token(int32_t id) const;  // empty when unknown
  // Number of distinct ids (vocabulary plus added tokens).
  size_t vocab_size() const;
  size_t merge_count() const;
  const std::vector<AddedToken>& added_tokens() const;
  const TokenizerConfig& config() const;
  // Where it was loaded from, for messages.
  const std::string& source() const;

  struct Impl;

 private:
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fluxrt::tokenizers
