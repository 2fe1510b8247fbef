#pragma once
// Qwen3 as the FLUX.2-klein text encoder (transformers' Qwen3Model driven the way diffusers'
// Flux2KleinPipeline._get_qwen3_prompt_embeds drives it): causal attention plus the padding mask,
// positions 0..L-1 whatever the padding, and the residual stream after decoder layers 9, 18 and 27
// (transformers' hidden_states[9], [18], [27]; hidden_states[0] is the token embedding) stacked per
// token into [B, L, 3H]. Only layers 0..26 are bound and computed; the final norm and the LM head
// are never used. Qwen3-4B (H 2560) for klein-4B, Qwen3-8B (H 4096) for klein-9B.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "core/tensor.h"
#include "models/weight_binder.h"
#include "nn/attention.h"
#include "nn/mlp.h"
#include "tokenizers/bpe_tokenizer.h"
#include "tokenizers/qwen_prompt.h"

namespace fluxrt::models {

// The config.json fields the encoder needs (transformers' Qwen3Config).
struct Qwen3Config {
  int64_t vocab_size = 151936;
  int64_t hidden_size = 2560;
  int64_t intermediate_size = 9728;
  int64_t num_layers = 36;
  int64_t num_heads = 32;
  int64_t num_kv_heads = 8;
  int64_t head_dim = 128;
  double rope_theta = 1e6;
  float rms_norm_eps = 1e-6f;

  // text_encoder/config.json. rope_theta is read from "rope_theta" (transformers 4.x) or
  // "rope_parameters.rope_theta" (5.x); head_dim defaults to hidden/heads when absent. Fails with
  // Format naming the file on missing/invalid fields, Unsupported on attention_bias or a sliding window.
  static Qwen3Config from_json_file(const std::filesystem::path& path);
  static Qwen3Config qwen3_4b();  // klein-4B's text encoder
  static Qwen3Config qwen3_8b();  // klein-9B's text encoder
};

// diffusers' default text_encoder_out_layers for FLUX.2-klein.
inline const std::vector<int> kKleinHiddenStateTaps = {9, 18, 27};

struct Qwen3EncoderOptions {
  DType dtype = DType::BF16;  // activation dtype and output dtype; F32 widens the weights once at load
  Device device = Device::cpu();
  std::vector<int> taps = kKleinHiddenStateTaps;  // transformers hidden_states indices, ascending, >= 1
  // synthetic() only: the linears and the embedding in this quantized type instead of bf16
  // (`fluxrt bench pipeline --weights q4_K`); unset keeps them dense.
  std::optional<QuantType> synthetic_weights;
};

class Qwen3Encoder {
 public:
  // config.json + the checkpoint in `text_encoder_dir` (Qwen3ForCausalLM "model." prefix or a bare
  // Qwen3Model). Tensors of layers past the last tap, the final norm and lm_head are ignored.
  static Qwen3Encoder load(const std::filesystem::path& text_encoder_dir, const Qwen3EncoderOptions& options = {});
  // A single file: a GGUF in llama.cpp's names (token_embd, blk.N.attn_q, ...; unsloth's and
  // others' Qwen3 GGUFs), its weights kept quantized, or a .safetensors in transformers' names
  // (ComfyUI's text_encoders/qwen_3_4b.safetensors). The config comes from the GGUF metadata and
  // the tensors' shapes (qwen3_file.cpp).
  static Qwen3Encoder load_file(const std::filesystem::path& file, const Qwen3EncoderOptions& options = {});
  // From tensors keyed by Qwen3Model names (embed_tokens.weight, layers.N.self_attn.q_proj.weight, ...).
  static Qwen3Encoder from_store(const Qwen3Config& config, const TensorStore& store,
                                 const Qwen3EncoderOptions& options = {});
  // Random weights of the config's shapes (bench; never zeros). Only the computed layers exist.
  static Qwen3Encoder synthetic(const Qwen3Config& config, const Qwen3EncoderOptions& options = {},
                                uint64_t seed = 42);

  // input_ids [B, L] (i32/i64), attention_mask [B, L] (any integer dtype, nonzero = real token)
  // -> [B, L, taps * H] in options.dtype. Padded rows are computed too (the pipeline feeds them
  // to the transformer): a pad query sees the real keys before it.
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask) const;

  const Qwen3Config& config() const { return config_; }
  const Qwen3EncoderOptions& options() const { return options_; }
  int64_t layers_computed() const { return static_cast<int64_t>(layers_.size()); }
  int64_t output_dim() const { return static_cast<int64_t>(options_.taps.size()) * config_.hidden_size; }
  // Multiply-add flops of one forward over B x L tokens: projections + the attention matmuls
  // counted over the causal half (scores and P.V over keys j <= i).
  double flops(int64_t batch, int64_t length) const;
  size_t weight_bytes() const;

 private:
  struct Layer {
    Tensor input_norm, post_norm;      // [H]
    nn::QkNormAttention attn;          // Qwen3Attention: q/k/v/o_proj, q_norm / k_norm [D]
    nn::Mlp mlp{nn::MlpKind::SwiGlu};  // Qwen3MLP: in = gate_proj, up = up_proj, out = down_proj
  };
  Qwen3Encoder(Qwen3Config config, Qwen3EncoderOptions options);
  static void validate(const Qwen3Config& config, const Qwen3EncoderOptions& options);
  void bind(const TensorStore& store);

  Qwen3Config config_;
  Qwen3EncoderOptions options_;
  Tensor embed_tokens_;  // [V, H], checkpoint dtype (the lookup converts rows)
  // Instead of embed_tokens_ when the file holds the table quantized (rows dequantized per lookup).
  std::shared_ptr<const QuantizedMatrix> embed_quantized_;
  std::vector<Layer> layers_;
};

// Prompts -> FLUX.2-klein prompt embeddings: the klein chat template, right padding to
// max_sequence_length (tokenizers::QwenPromptEncoder), then the encoder.
struct PromptEmbeddings {
  Tensor embeds;          // [B, L, 3H] in the encoder's dtype
  Tensor attention_mask;  // [B, L] i32 (1 = real token); the transformer itself gets no text mask
  Tensor input_ids;       // [B, L] i32
  std::vector<int32_t> num_tokens;
};

class KleinPromptEmbedder {
 public:
  KleinPromptEmbedder(Qwen3Encoder encoder, tokenizers::BpeTokenizer tokenizer);
  // The prompt encoder refers to tokenizer_: neither copyable nor movable (hold it by pointer).
  KleinPromptEmbedder(const KleinPromptEmbedder&) = delete;
  KleinPromptEmbedder& operator=(const KleinPromptEmbedder&) = delete;
  // A diffusers Flux2KleinPipeline folder: text_encoder/ and tokenizer/.
  // With `text_encoder_file` set, the encoder is that single file (Qwen3Encoder::load_file)
  // instead of model_root/text_encoder; the tokenizer is model_root/tokenizer either way.
  static std::unique_ptr<KleinPromptEmbedder> load(const std::filesystem::path& model_root,
                                                   const Qwen3EncoderOptions& options = {},
                                                   const std::filesystem::path& text_encoder_file = {});

  PromptEmbeddings embed(const std::vector<std::string>& prompts,
                         int max_sequence_length = tokenizers::kQwenDefaultMaxSequenceLength) const;

  const Qwen3Encoder& encoder() const { return encoder_; }

 private:
  Qwen3Encoder encoder_;
  tokenizers::BpeTokenizer tokenizer_;
  std::unique_ptr<tokenizers::QwenPromptEncoder> prompt_encoder_;  // refers to tokenizer_
};

}  // namespace fluxrt::models
