#pragma once
// The T5 tokenizer of FLUX.1 (tokenizer_2 = google/t5-v1_1-xxl), reproducing what diffusers'
// FluxPipeline gets from transformers' T5TokenizerFast (transformers 5.x: the `tokenizers`-backed
// T5Tokenizer), not plain SentencePiece:
//   1. the special tokens <pad> 0, </s> 1, <unk> 2 and <extra_id_0..99> (32099..32000) are cut out
//      of the raw text and map to their ids (SentencePiece alone would spell them out);
//   2. the SentencePiece precompiled charsmap (NFKC-like folding, tabs/newlines/NBSP -> space,
//      "▁" -> space) is applied per grapheme cluster, `tokenizers`' way;
//   3. WhitespaceSplit (any Unicode White_Space, e.g. U+0085, separates words; SentencePiece keeps
//      U+0085 as an unknown character), then Metaspace: every word gets a leading "▁";
//   4. Unigram Viterbi per word over the piece scores; unknown characters fuse into one <unk>;
//   5. "</s>" appended.
// Both spiece.model (read with libsentencepiece) and tokenizer.json (its Unigram vocabulary and
// Precompiled charsmap) load into this same pipeline, as transformers rebuilds it from either file.
// The published tokenizer.json's own normalizer/pre-tokenizer (Strip + Replace, no WhitespaceSplit)
// is NOT what transformers runs; they differ on U+0085 only in the corpus. The tokenizer.json that
// transformers 5 saves (with no spiece.model next to it) spells out the pipeline it runs instead.
//
// Padding as FluxPipeline._get_t5_prompt_embeds asks: padding="max_length", truncation=True,
// max_length = 512 (dev) / 256 (schnell); a too-long prompt keeps max_length-1 ids and ends with
// </s>; pads are 0 on the right, attention mask 1 for real tokens (the pipeline passes no mask to
// the encoder, it is returned for callers that want it).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizers/qwen_prompt.h"  // PromptEncoding, PromptBatch

namespace fluxrt::tokenizers {

inline constexpr int kT5MaxSequenceLengthDev = 512;      // FLUX.1-dev (and diffusers' default)
inline constexpr int kT5MaxSequenceLengthSchnell = 256;  // FLUX.1-schnell (BFL's and the model card's)

class T5Tokenizer {
 public:
  // A model folder (the pipeline's `tokenizer_2/`): spiece.model when present, else tokenizer.json.
  // ErrorCode::NotFound when neither is there.
  static T5Tokenizer from_directory(const std::filesystem::path& dir);
  // spiece.model (SentencePiece unigram model with a precompiled charsmap) + the 100 T5 sentinels.
  static T5Tokenizer from_spiece_model(const std::filesystem::path& spiece_model);
  // tokenizer.json with a Unigram model; its added_tokens are the special tokens.
  static T5Tokenizer from_tokenizer_json(const std::filesystem::path& tokenizer_json);

  T5Tokenizer(T5Tokenizer&&) noexcept;
  T5Tokenizer& operator=(T5Tokenizer&&) noexcept;
  ~T5Tokenizer();

  // tokenizer(text)["input_ids"]: the ids followed by </s> (no truncation). InvalidArgument on
  // invalid UTF-8. Thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;
  // tokenizer(text, padding="max_length", truncation=True, max_length=max_length).
  // InvalidArgument when max_length < 1 or > 1 << 20.
  PromptEncoding encode_padded(std::string_view text, int max_length = kT5MaxSequenceLengthDev) const;
  // Each prompt on its own, then stacked [batch, max_length] (the batched tokenizer call pads every
  // row to max_length too).
  PromptBatch encode_batch(const std::vector<std::string>& prompts, int max_length = kT5MaxSequenceLengthDev) const;

  // The charsmap step alone (tests).
  std::string normalize(std::string_view text) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string_view id_to_token(int32_t id) const;  // empty when unknown
  size_t vocab_size() const;                       // 32100 for T5 v1.1
  int32_t pad_id() const;
  int32_t eos_id() const;
  int32_t unk_id() const;
  const std::string& source() const;  // the file it was loaded from

  struct Impl;

 private:
  explicit T5Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fluxrt::tokenizers
