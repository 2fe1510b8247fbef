#pragma once
// CLIP BPE tokenizer (openai/clip-vit-large-patch14, the FLUX.1 `tokenizer/`), reproducing
// transformers' CLIPTokenizer as FluxPipeline._get_clip_prompt_embeds calls it. transformers 5's
// CLIPTokenizer is the `tokenizers`-backed pipeline (there is no ftfy branch any more; ftfy is not a
// dependency of diffusers either), so that pipeline is the reference:
//   1. added tokens whose config says normalized=false ("<|endoftext|>") are cut out of the raw text;
//   2. each remaining stretch: NFC, every run of Unicode white space -> one " ", then per-character
//      lower-casing (no final-sigma rule: "ΟΔΟΣ" -> "οδοσ");
//   3. added tokens with normalized=true ("<|startoftext|>" in the FLUX.1 config) are cut out of the
//      normalised text, so "<|StartOfText|>" is that token too;
//   4. the CLIP regex keeps letter runs, single digits, runs of other non-space symbols and the
//      contractions 's 't 're 've 'm 'll 'd; everything else (white space) is dropped;
//   5. the byte-level pre-tokenizer splits each piece again with the GPT-2 regex (only changes
//      "<|startoftext|>"-like pieces that did not match as added tokens);
//   6. BPE over the GPT-2 byte alphabet with "</w>" appended to each piece's last symbol.
// encode_padded() then adds BOS/EOS, truncates to max_length (75 text ids + the two markers for 77)
// and pads with the pad token (EOS, 49407, for FLUX.1).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fluxrt::tokenizers {

// CLIP-L's context length (max_position_embeddings) and FluxPipeline's tokenizer_max_length.
inline constexpr int kClipMaxLength = 77;
// The largest max_length encode_padded accepts (T5's bound too): far beyond any CLIP context, and
// a bound on what a wrong length can allocate.
inline constexpr int kClipMaxLengthLimit = 1 << 20;

class ClipTokenizer {
 public:
  // A model folder: tokenizer.json when present (what transformers 5 saves, and what it reads when a
  // folder also has the older files), otherwise vocab.json + merges.txt. tokenizer_config.json (and
  // special_tokens_map.json) when present give the special tokens, otherwise transformers'
  // CLIPTokenizer defaults apply (bos "<|startoftext|>", eos = pad = unk "<|endoftext|>").
  // ErrorCode::NotFound when neither layout is there, ErrorCode::Format when the files are
  // malformed or the special tokens are not in the vocabulary.
  static ClipTokenizer from_directory(const std::filesystem::path& dir);
  // `config` may be empty (defaults as above).
  static ClipTokenizer from_files(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt,
                                  const std::filesystem::path& config = {});
  // A tokenizer.json with a BPE model (merges as "a b" strings or [a, b] pairs). As transformers 5,
  // only its vocabulary, merges, unk token and added tokens (with their normalized flags) are read;
  // the pipeline above is CLIP's whatever the file's normalizer and pre-tokenizer say.
  // ErrorCode::Unsupported when the model is not BPE or its end-of-word suffix is not "</w>".
  static ClipTokenizer from_tokenizer_json(const std::filesystem::path& tokenizer_json,
                                           const std::filesystem::path& config = {});

  ClipTokenizer(ClipTokenizer&&) noexcept;
  ClipTokenizer& operator=(ClipTokenizer&&) noexcept;
  ~ClipTokenizer();

  // Ids of `text` without BOS/EOS and without truncation. ErrorCode::InvalidArgument when `text` is
  // not valid UTF-8. Thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;

  // What tokenizer(text, padding="max_length", max_length=max_length, truncation=True) returns:
  // [BOS, first max_length-2 text ids, EOS, pad...], exactly max_length ids.
  // ErrorCode::InvalidArgument for invalid UTF-8 or max_length outside 2..kClipMaxLengthLimit.
  std::vector<int32_t> encode_padded(std::string_view text, int max_length = kClipMaxLength) const;
  // Same, and says whether text ids were dropped (diffusers logs a warning then).
  std::vector<int32_t> encode_padded(std::string_view text, int max_length, bool& truncated) const;

  // Text of the ids as transformers decodes them: byte-level symbols back to bytes, each "</w>"
  // becomes a space, special tokens kept as their text, outer spaces stripped.
  // ErrorCode::InvalidArgument on an unknown id.
  std::string decode(std::span<const int32_t> ids) const;

  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string_view id_to_token(int32_t id) const;  // empty when unknown
  size_t vocab_size() const;
  size_t merge_count() const;
  const std::string& source() const;

  struct Impl;

 private:
  explicit ClipTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The text stages 2 above (NFC, white-space runs to one space, per-character lower case), exposed
// for tests. `text` must be valid UTF-8.
std::string clip_normalize(std::string_view text);

// Version of the Unicode tables (utf8proc) behind the lower-casing and the character classes, e.g.
// "15.0.0". Characters newer than this are treated as unassigned symbols.
std::string_view clip_unicode_version();

}  // namespace fluxrt::tokenizers
