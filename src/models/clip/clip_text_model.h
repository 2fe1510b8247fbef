#pragma once
// CLIP-L text model as FLUX.1 uses it (transformers' CLIPTextModel called the way diffusers'
// FluxPipeline._get_clip_prompt_embeds calls it: input_ids only, no attention mask): token +
// learned position embeddings, pre-LN encoder layers with causal attention and quick-GELU MLPs, a
// final LayerNorm, and the pooled output = the final-LN hidden state of each row at its end token.
// FLUX.1 consumes only the pooled [B, 768] vector (no text projection).
//
// Pooling follows transformers: with the legacy eos_token_id 2 of openai/clip-vit-large-patch14's
// config the position is the argmax of the ids (the first 49407, the largest id); otherwise it is
// the first position holding eos_token_id (position 0 when a row has none, as torch.argmax gives).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "models/lora/lora_delta.h"
#include "models/weight_binder.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "tokenizers/clip_tokenizer.h"

namespace fluxrt::models {

// The config.json fields the model needs (transformers' CLIPTextConfig).
struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_layers = 12;
  int64_t num_heads = 12;
  int64_t max_position_embeddings = 77;
  float layer_norm_eps = 1e-5f;
  int64_t eos_token_id = 2;  // 2: the legacy argmax-of-ids pooling

  // A CLIPTextModel config.json, or a CLIPModel one (its "text_config" is read). Fails with Format
  // naming the file on missing/invalid fields, Unsupported on an activation other than quick_gelu.
  static ClipTextConfig from_json_file(const std::filesystem::path& path);
  static ClipTextConfig clip_l();  // openai/clip-vit-large-patch14, FLUX.1's text_encoder
};

struct ClipTextOptions {
  DType dtype = DType::BF16;  // activation and output dtype; F32 widens the weights once at load
  Device device = Device::cpu();
  // LoRA files whose CLIP parts are merged into the weights at load (their transformer parts are
  // the transformer's); files without a CLIP part change nothing here.
  std::vector<LoraSpec> loras;
};

struct ClipTextOutput {
  Tensor last_hidden_state;  // [B, L, H] after the final LayerNorm
  Tensor pooled;             // [B, H]: last_hidden_state at each row's end token
};

class ClipTextModel {
 public:
  // config.json + the checkpoint in `text_encoder_dir`. Keys with transformers 4's "text_model."
  // prefix (FLUX.1's text_encoder/, openai CLIPModel checkpoints: the vision tower is then outside
  // the prefix and never read) or bare transformers 5 keys.
  static ClipTextModel load(const std::filesystem::path& text_encoder_dir, const ClipTextOptions& options = {});
  // From tensors keyed by CLIPTextModel names without prefix (embeddings.token_embedding.weight,
  // encoder.layers.N.self_attn.q_proj.weight, final_layer_norm.weight, ...).
  static ClipTextModel from_store(const ClipTextConfig& config, const TensorStore& store,
                                  const ClipTextOptions& options = {});
  // Random weights of the config's shapes (bench; never zeros).
  static ClipTextModel synthetic(const ClipTextConfig& config, const ClipTextOptions& options = {},
                                 uint64_t seed = 42);

  // input_ids [B, L] (i32/i64), 1 <= L <= max_position_embeddings, ids in [0, vocab_size).
  ClipTextOutput forward(const Tensor& input_ids) const;

  // The row positions forward() pools at, per the config's eos_token_id rule.
  std::vector<int64_t> pooled_positions(const Tensor& input_ids) const;

  const ClipTextConfig& config() const { return config_; }
  const ClipTextOptions& options() const { return options_; }
  // Multiply-add flops of one forward over B x L tokens (projections + causal attention).
  double flops(int64_t batch, int64_t length) const;
  size_t weight_bytes() const;

 private:
  struct Layer {
    Tensor ln1_weight, ln1_bias, ln2_weight, ln2_bias;  // [H]
    // q, k and v in one GEMM: weights concatenated at load ([3H, H], a copy of 3.5 MB per CLIP-L
    // layer in bf16), read back as three column views.
    nn::Linear qkv, out;
    nn::Mlp mlp{nn::MlpKind::QuickGelu};  // CLIPMLP: in = fc1, out = fc2
  };
  ClipTextModel(ClipTextConfig config, ClipTextOptions options);
  static void validate(const ClipTextConfig& config, const ClipTextOptions& options);
  void bind(const TensorStore& store);
  void place_all();  // embeddings and LayerNorm parameters onto options_.device

  ClipTextConfig config_;
  ClipTextOptions options_;
  Tensor token_embedding_;     // [V, H], checkpoint dtype (the lookup converts rows)
  Tensor position_embedding_;  // [P, H] in the activation dtype
  std::vector<Layer> layers_;
  Tensor final_ln_weight_, final_ln_bias_;  // [H]
};

// Prompts -> FLUX.1's pooled CLIP embeddings, as FluxPipeline._get_clip_prompt_embeds makes them:
// the tokenizer with padding="max_length", max_length 77 and truncation, then the text model on the
// padded ids (no attention mask), keeping the pooled output.
struct ClipPromptEmbeddings {
  Tensor pooled;           // [B, H] in the model's dtype (FLUX.1's pooled_projections)
  Tensor input_ids;        // [B, 77] i32
  std::vector<bool> truncated;  // per prompt: text tokens beyond 75 were dropped (diffusers warns)
};

class ClipPromptEmbedder {
 public:
  ClipPromptEmbedder(ClipTextModel model, tokenizers::ClipTokenizer tokenizer);
  // A diffusers FluxPipeline folder: text_encoder/ and tokenizer/.
  static std::unique_ptr<ClipPromptEmbedder> load(const std::filesystem::path& model_root,
                                                  const ClipTextOptions& options = {});

  // Fails with InvalidArgument on no prompts or invalid UTF-8.
  ClipPromptEmbeddings embed(const std::vector<std::string>& prompts) const;

  const ClipTextModel& model() const { return model_; }
  const tokenizers::ClipTokenizer& tokenizer() const { return tokenizer_; }

 private:
  ClipTextModel model_;
  tokenizers::ClipTokenizer tokenizer_;
};

}  // namespace fluxrt::models
