#include "tokenizers/qwen_prompt.h"

#include <algorithm>

#include "core/error.h"

namespace fluxrt::tokenizers {

static constexpr std::string_view kUserPrefix = "<|im_start|>user\n";
static constexpr std::string_view kAssistantSuffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
// The transformers limit on one call is model_max_length (131072 for Qwen3); anything above that is
// surely a mistake, and would allocate a needlessly large buffer.
static constexpr int kMaxSequenceLengthLimit = 131072;

std::string render_qwen3_user_prompt(std::string_view prompt) {
  std::string text;
  text.reserve(kUserPrefix.size() + prompt.size() + kAssistantSuffix.size());
  text.append(kUserPrefix).append(prompt).append(kAssistantSuffix);
  return text;
}

QwenPromptEncoder::QwenPromptEncoder(const BpeTokenizer& tokenizer) : tokenizer_(tokenizer) {
  for (std::string_view token : {"<|im_start|>", "<|im_end|>", "<think>", "</think>"}) {
    if (!tokenizer.token_to_id(token)) {
      fail(ErrorCode::Format, "{}: tokenizer has no '{}' token, so it cannot render the Qwen3 chat template",
           tokenizer.source(), token);
    }
  }
  const TokenizerConfig& config = tokenizer.config();
  auto is_left = [&](const std::optional<std::string>& side, const char* key) {
    if (!side || *side == "right") return false;
    if (*side == "left") return true;
    fail(ErrorCode::Format, "{}: {} '{}' is neither 'left' nor 'right'", tokenizer.source(), key, *side);
  };
  pad_left_ = is_left(config.padding_side, "padding_side");
  truncate_left_ = is_left(config.truncation_side, "truncation_side");
  const std::string pad_token = config.pad_token.value_or("<|endoftext|>");
  auto pad = tokenizer.token_to_id(pad_token);
  if (!pad) fail(ErrorCode::Format, "{}: pad token '{}' is not in the vocabulary", tokenizer.source(), pad_token);
  pad_id_ = *pad;
}

std::vector<int32_t> QwenPromptEncoder::encode_unpadded(std::string_view prompt) const {
  // One string, as the reference tokenises it: "user\n" and the prompt form one pre-tokenizer
  // segment, which matters when the prompt starts with whitespace ("\n\n" is a single token).
  return tokenizer_.encode(render_qwen3_user_prompt(prompt));
}

static void check_length(int max_sequence_length) {
  if (max_sequence_length < 1 || max_sequence_length > kMaxSequenceLengthLimit) {
    fail(ErrorCode::InvalidArgument, "qwen prompt: max_sequence_length {} outside 1..{}", max_sequence_length,
         kMaxSequenceLengthLimit);
  }
}

PromptEncoding QwenPromptEncoder::encode(std::string_view prompt, int max_sequence_length) const {
  check_length(max_sequence_length);
  PromptEncoding result;
  std::vector<int32_t> ids = encode_unpadded(prompt);
  const size_t length = static_cast<size_t>(max_sequence_length);
  result.truncated = ids.size() > length;
  // Right truncation (the default) loses the end of the template too, as in the reference.
  const size_t keep = std::min(ids.size(), length);
  const auto first = truncate_left_ ? ids.end() - static_cast<std::ptrdiff_t>(keep) : ids.begin();
  result.num_tokens = static_cast<int32_t>(keep);
  result.input_ids.assign(length, pad_id_);
  result.attention_mask.assign(length, 0);
  const size_t offset = pad_left_ ? length - keep : 0;
  std::copy(first, first + static_cast<std::ptrdiff_t>(keep), result.input_ids.begin() + static_cast<std::ptrdiff_t>(offset));
  std::fill_n(result.attention_mask.begin() + static_cast<std::ptrdiff_t>(offset), keep, 1);
  return result;
}

PromptBatch QwenPromptEncoder::encode_batch(const std::vector<std::string>& prompts, int max_sequence_length) const {
  check_length(max_sequence_length);
  PromptBatch batch;
  batch.batch = static_cast<int32_t>(prompts.size());
  batch.length = max_sequence_length;
  batch.input_ids.reserve(prompts.size() * static_cast<size_t>(max_sequence_length));
  batch.attention_mask.reserve(batch.input_ids.capacity());
  for (const std::string& prompt : prompts) {
    PromptEncoding row = encode(prompt, max_sequence_length);
    batch.input_ids.insert(batch.input_ids.end(), row.input_ids.begin(), row.input_ids.end());
    batch.attention_mask.insert(batch.attention_mask.end(), row.attention_mask.begin(), row.attention_mask.end());
    batch.num_tokens.push_back(row.num_tokens);
  }
  return batch;
}

}  // namespace fluxrt::tokenizers
