#pragma once
// Prompt encoding for the Qwen3 text encoder of FLUX.2-klein, as diffusers' Flux2KleinPipeline does it
// (_get_qwen3_prompt_embeds): the prompt becomes one user message of the Qwen3 chat template with
// add_generation_prompt=True and enable_thinking=False, i.e.
//   "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
// which is tokenised as one string (added tokens cut out first), cut to max_sequence_length and
// padded with the pad token; the attention mask is 1 for real tokens, 0 for pads. Padding and
// truncation are on the right unless tokenizer_config.json says otherwise (padding_side /
// truncation_side), as in transformers; the Qwen3 files set neither.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizers/bpe_tokenizer.h"

namespace fluxrt::tokenizers {

// diffusers' default; 256 is the other common choice (faster, shorter prompts).
inline constexpr int kQwenDefaultMaxSequenceLength = 512;

struct PromptEncoding {
  std::vector<int32_t> input_ids;       // max_sequence_length ids
  std::vector<int32_t> attention_mask;  // 1 for real tokens, 0 for pads
  int32_t num_tokens = 0;               // real (unpadded) tokens after truncation
  bool truncated = false;               // the templated prompt had more than max_sequence_length tokens
};

// Several prompts, row-major [batch, length] like the tensors diffusers builds with torch.cat.
struct PromptBatch {
  int32_t batch = 0;
  int32_t length = 0;
  std::vector<int32_t> input_ids;       // batch * length
  std::vector<int32_t> attention_mask;  // batch * length
  std::vector<int32_t> num_tokens;      // per row
};

// The chat-template text for one user message, thinking disabled.
std::string render_qwen3_user_prompt(std::string_view prompt);

class QwenPromptEncoder {
 public:
  // Keeps a reference: `tokenizer` must outlive the encoder. Fails with ErrorCode::Format when the
  // tokenizer lacks the chat tokens or a pad token (tokenizer_config's pad_token, else
  // "<|endoftext|>"), or when padding_side / truncation_side is neither "left" nor "right".
  explicit QwenPromptEncoder(const BpeTokenizer& tokenizer);

  // Fails with ErrorCode::InvalidArgument on invalid UTF-8 or max_sequence_length < 1.
  PromptEncoding encode(std::string_view prompt, int max_sequence_length = kQwenDefaultMaxSequenceLength) const;
  // Each prompt encoded on its own (as the pipeline loops over them), then stacked.
  PromptBatch encode_batch(const std::vector<std::string>& prompts,
                           int max_sequence_length = kQwenDefaultMaxSequenceLength) const;
  // The templated ids before truncation and padding.
  std::vector<int32_t> encode_unpadded(std::string_view prompt) const;

  int32_t pad_id() const { return pad_id_; }

 private:
  const BpeTokenizer& tokenizer_;
  int32_t pad_id_ = -1;
  bool pad_left_ = false;
  bool truncate_left_ = false;
};

}  // namespace fluxrt::tokenizers
