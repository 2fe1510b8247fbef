#include "tokenizers/qwen_prompt.h"

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
  if (config.padding_side && *config.padding_side != "right") {
    fail(ErrorCode::Unsupported, "{}: padding_side '{}' is not supported (FLUX.2-klein pads on the right)",
         tokenizer.source(), *config.padding_side);
  }
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

PromptEncoding QwenPromptEncoder::encode(std::string_view prompt, int max_sequence_length) const {
  if (max_sequence_length < 1 || max_sequence_length > kMaxSequenceLengthLimit) {
    fail(ErrorCode::InvalidArgument, "qwen prompt: max_sequence_length {} outside 1..{}", max_sequence_length,
         kMaxSequenceLengthLimit);
  }
  PromptEncoding result;
  result.input_ids = encode_unpadded(prompt);
  const size_t length = static_cast<size_t>(max_sequence_length);
  result.truncated = result.input_ids.size() > length;
  if (result.truncated) result.input_ids.resize(length);  // the reference cuts the suffix off too
  result.num_tokens = static_cast<int32_t>(result.input_ids.size());
  result.attention_mask.assign(length, 0);
  std::fill(result.attention_mask.begin(), result.attention_mask.begin() + result.num_tokens, 1);
  result.input_ids.resize(length, pad_id_);
  return result;
}

}  // namespace fluxrt::tokenizers
