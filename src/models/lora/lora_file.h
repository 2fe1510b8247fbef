#pragma once
// A LoRA file as read (docs/lora.md): every adapted module with its down (A) and up (B) matrices
// and its alpha / scale, under one normalised, dotted module name, whatever tool wrote it.
//
// Accepted key schemes (the prefixes and suffixes are stripped, underscores put back to dots):
//   diffusers / PEFT   transformer.transformer_blocks.0.attn.to_q.lora_A.weight (+ lora_B)
//   PEFT-wrapped       base_model.model.<name>, transformer.base_model.model.<name> (fal, SimpleTuner)
//   BFL / ComfyUI      diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight, .lora_down/.lora_up
//   kohya / musubi     lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight + .alpha, and the
//                      mixed form double_blocks.0.img_attn_qkv.lora_A.weight; kohya in diffusers
//                      names (lora_unet_single_transformer_blocks_0_attn_to_k)
//   OneTrainer         lora_transformer_<diffusers name with underscores>
//   XLabs (FLUX.1)     double_blocks.0.processor.qkv_lora1.down.weight (no alpha)
//   CLIP-L text encoder (FLUX.1): lora_te1_text_model_encoder_layers_0_self_attn_q_proj (kohya,
//                      OneTrainer; lora_te_ too), text_encoder.text_model.encoder.layers.0... (diffusers),
//                      text_encoders.clip_l.transformer.text_model... (ComfyUI): attention projections
//                      and MLP fc1 / fc2, named kClipTextModulePrefix + the CLIPTextModel module.
//   T5 text encoder (FLUX.1): lora_te3_encoder_block_0_layer_0_SelfAttention_q (kohya; lora_te2_
//                      OneTrainer), text_encoder_2.encoder.block.0... (diffusers names),
//                      text_encoders.t5xxl.transformer.encoder... (ComfyUI): q, k, v, o, wi_0, wi_1, wo,
//                      named kT5TextModulePrefix + the T5EncoderModel module.
// Refused by name, never applied in part: LyCORIS LoKr (lokr_w1...) and LoHa (hada_w1_a...),
// DoRA (dora_scale), and any key that matches none of the above (listed in the error).
//
// The factor of a module: a `.scale` tensor when present, else alpha / rank (rank = rows of A),
// alpha from the `.alpha` tensor, else from diffusers' `lora_adapter_metadata` header entry
// (lora_alpha, alpha_pattern), else alpha = rank (factor 1).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace fluxrt::models {

// Modules of FLUX.1's text encoders are named these + the CLIPTextModel / T5EncoderModel module.
inline constexpr const char* kClipTextModulePrefix = "text_encoder.";
inline constexpr const char* kT5TextModulePrefix = "text_encoder_2.";

struct LoraModule {
  std::string key;     // the stored key stem, for messages: "lora_unet_double_blocks_0_img_attn_qkv"
  std::string module;  // normalised: "double_blocks.0.img_attn.qkv", "transformer_blocks.0.attn.to_q",
                       // "text_encoder.encoder.layers.0.mlp.fc1",
                       // "text_encoder_2.encoder.block.0.layer.1.DenseReluDense.wo"
  Tensor down;         // A [r, in], as stored
  Tensor up;           // B [out, r], as stored
  std::optional<float> alpha;
  std::optional<float> scale;  // a `.scale` tensor: the factor itself
  int64_t rank() const { return down.size(0); }
  // scale, else alpha / rank, else 1.
  float factor() const;
};

// Which model a file is for is not read here: each transformer architecture's name scheme
// (lora_scheme.h) says which module names only it has.
struct LoraFile {
  std::string path;
  std::string format;  // "diffusers/PEFT", "kohya", "BFL/ComfyUI", "XLabs", ... (what `fluxrt info` says)
  std::vector<LoraModule> modules;  // sorted by module name
};

// Reads and classifies `path` (the usual safetensors errors for an unreadable file). Throws Format
// listing the keys that fit no scheme, Unsupported naming LoKr / LoHa / DoRA keys.
LoraFile read_lora_file(const std::string& path);

// The same over tensors already in memory (tests, the fuzzer): `metadata` is the safetensors
// __metadata__ map, `description` names the source in errors.
LoraFile parse_lora(const std::map<std::string, Tensor>& tensors,
                    const std::map<std::string, std::string>& metadata, const std::string& description);

}  // namespace fluxrt::models
