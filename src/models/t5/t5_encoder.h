#pragma once
// T5 v1.1 encoder as the FLUX.1 text encoder 2 (transformers' T5EncoderModel driven the way
// diffusers' FluxPipeline._get_t5_prompt_embeds drives it: input_ids only, NO attention mask, so
// pad tokens are attended like real ones and every padded row is computed and returned).
//
// Mirrors transformers' modeling_t5: shared embedding (no scaling, no absolute positions); per
// block x += o(attn(T5LayerNorm(x))) with scores q.k^T WITHOUT 1/sqrt(d_kv) plus the relative
// position bias computed once by block 0 (bidirectional buckets) and reused by every block;
// x += wo(gelu_tanh(wi_0 h) * wi_1 h), h = T5LayerNorm(x); final T5LayerNorm. No biases anywhere.
// transformers' inf clamp and its fp32 `wo` apply to float16 only; in bf16 (what FLUX runs) and
// f32 the stream is plain, as here (float16 activations are not offered: T5 v1.1 overflows them).
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "core/tensor.h"
#include "models/lora/lora_delta.h"
#include "models/weight_binder.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "tokenizers/t5_tokenizer.h"

namespace fluxrt::models {

// The config.json fields the encoder needs (transformers' T5Config).
struct T5Config {
  int64_t vocab_size = 32128;
  int64_t d_model = 4096;
  int64_t d_kv = 64;
  int64_t d_ff = 10240;
  int64_t num_layers = 24;
  int64_t num_heads = 64;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  float layer_norm_epsilon = 1e-6f;

  // text_encoder_2/config.json. Fails with Format naming the file on missing/invalid fields and
  // Unsupported on a feed-forward other than gated-gelu (T5 v1.1) or a decoder config.
  static T5Config from_json_file(const std::filesystem::path& path);
  static T5Config t5_v1_1_xxl();  // google/t5-v1_1-xxl, FLUX.1's text_encoder_2 (4.76B parameters)
};

// transformers' T5Attention._relative_position_bucket for an encoder (bidirectional): half the
// buckets per direction (+half when the key is after the query), exact up to half of those, then
// logarithmic up to max_distance, capped at the last bucket.
int64_t t5_relative_position_bucket(int64_t relative_position, int64_t num_buckets, int64_t max_distance);

struct T5EncoderOptions {
  DType dtype = DType::BF16;  // activation and output dtype; F32 widens the weights once at load
  Device device = Device::cpu();
  // LoRA files whose T5 parts are merged into the weights at load (their other parts are the
  // other models'); files without a T5 part change nothing here.
  std::vector<LoraSpec> loras;
};

class T5Encoder {
 public:
  // config.json + the checkpoint in `text_encoder_dir` (one file or sharded with an index). The
  // embedding is read from "shared.weight" or "encoder.embed_tokens.weight" (tied copies).
  static T5Encoder load(const std::filesystem::path& text_encoder_dir, const T5EncoderOptions& options = {});
  // A single file: a GGUF in llama.cpp's names (enc.blk.N.attn_q, ...: city96's t5-v1_1-xxl
  // encoder GGUFs), its weights kept quantized, or a .safetensors in transformers' names
  // (ComfyUI's t5xxl_fp16.safetensors). The config comes from the GGUF metadata and the shapes
  // (t5_file.cpp).
  static T5Encoder load_file(const std::filesystem::path& file, const T5EncoderOptions& options = {});
  // From tensors keyed by T5EncoderModel names (shared.weight, encoder.block.N.layer.0.SelfAttention.q.weight, ...).
  static T5Encoder from_store(const T5Config& config, const TensorStore& store, const T5EncoderOptions& options = {});
  // Random weights of the config's shapes (bench; never zeros).
  static T5Encoder synthetic(const T5Config& config, const T5EncoderOptions& options = {}, uint64_t seed = 42);

  // input_ids [B, L] (i32/i64, ids < vocab_size) -> last_hidden_state [B, L, d_model] in options.dtype.
  Tensor forward(const Tensor& input_ids) const;
  // The position bias block 0 computes: [1, heads, L, L] f32 (exposed for tests). Built once per
  // length and cached (it depends on nothing else): 64 MiB for T5-XXL at 512 tokens, so only the
  // last few lengths are kept.
  Tensor position_bias(int64_t length) const;

  const T5Config& config() const { return config_; }
  const T5EncoderOptions& options() const { return options_; }
  // Multiply-add flops of one forward over B x L tokens (projections and both attention matmuls).
  double flops(int64_t batch, int64_t length) const;
  size_t weight_bytes() const;

 private:
  // q, k, v are fused into one [3 inner, d_model] linear and wi_0, wi_1 into one [2 d_ff, d_model]
  // at load (rows stacked in that order): one GEMM reads the normed activations instead of three
  // (two); the outputs are used as strided views.
  // Quantized weights (GGUF) are not stacked: stacking would copy their bytes, so q, k, v stay
  // three linears and wi_1 is the MLP's `up`.
  struct Layer {
    Tensor attn_norm, ff_norm;  // [d_model]
    nn::Linear qkv, o;
    nn::Linear q, k, v;  // instead of qkv for quantized weights
    nn::Mlp ff{
        nn::MlpKind::GatedGeluTanh};  // T5DenseGatedActDense: in = wi_0 | wi_1 (or up = wi_1), out = wo
  };
  T5Encoder(T5Config config, T5EncoderOptions options);
  static void validate(const T5Config& config, const T5EncoderOptions& options);
  void bind(const TensorStore& store);
  void place_all();  // embedding table and norm weights onto options_.device

  T5Config config_;
  T5EncoderOptions options_;
  Tensor shared_;                // [V, d_model], checkpoint dtype (the lookup converts rows)
  // Instead of shared_ when the file holds the table quantized (rows dequantized per lookup).
  std::shared_ptr<const QuantizedMatrix> shared_quantized_;
  Tensor relative_bias_;         // [buckets, heads] f32
  // position_bias() results by length, shared by copies of the encoder (same weights). Behind a
  // pointer so the encoder stays movable; the mutex makes concurrent forwards safe.
  struct PositionBiasCache {
    std::mutex mutex;
    std::map<int64_t, Tensor> by_length;
    std::vector<int64_t> recent;  // least recently used first
  };
  std::shared_ptr<PositionBiasCache> bias_cache_ = std::make_shared<PositionBiasCache>();
  Tensor build_position_bias(int64_t length) const;
  Tensor final_norm_;            // [d_model]
  std::vector<Layer> layers_;
};

// Prompts -> FLUX.1 T5 prompt embeddings: tokenizer_2 with padding="max_length" and truncation
// (512 for dev, 256 for schnell), then the encoder on the padded ids, as the pipeline does.
struct T5PromptEmbeddings {
  Tensor embeds;          // [B, L, d_model] in the encoder's dtype
  Tensor input_ids;       // [B, L] i32
  Tensor attention_mask;  // [B, L] i32, 1 = real token (informational: the encoder ignores it)
  std::vector<int32_t> num_tokens;
};

class T5PromptEmbedder {
 public:
  T5PromptEmbedder(T5Encoder encoder, tokenizers::T5Tokenizer tokenizer);
  // A diffusers FluxPipeline folder: text_encoder_2/ and tokenizer_2/.
  // With `text_encoder_file` set, the encoder is that single file (T5Encoder::load_file) instead
  // of model_root/text_encoder_2; the tokenizer is model_root/tokenizer_2 either way.
  static std::unique_ptr<T5PromptEmbedder> load(const std::filesystem::path& model_root,
                                                const T5EncoderOptions& options = {},
                                                const std::filesystem::path& text_encoder_file = {});

  T5PromptEmbeddings embed(const std::vector<std::string>& prompts,
                           int max_sequence_length = tokenizers::kT5MaxSequenceLengthDev) const;

  const T5Encoder& encoder() const { return encoder_; }
  const tokenizers::T5Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  T5Encoder encoder_;
  tokenizers::T5Tokenizer tokenizer_;
};

}  // namespace fluxrt::models
