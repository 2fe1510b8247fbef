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
// Besides plain LoRA (A, B), every scheme above may carry LyCORIS modules under the same names:
//   LoKr   .lokr_w1 or .lokr_w1_a + .lokr_w1_b, .lokr_w2 or .lokr_w2_a + .lokr_w2_b, .alpha
//   LoHa   .hada_w1_a, .hada_w1_b, .hada_w2_a, .hada_w2_b, .alpha
// and DoRA's magnitude on any kind: kohya / LyCORIS `.dora_scale`, PEFT `.lora_magnitude_vector`.
// A file may mix kinds across modules. Refused, never applied in part: Tucker cores (lokr_t2,
// hada_t1 / t2, lora_mid: convolutions only, never on a linear), the other LyCORIS algorithms
// (OFT, BOFT, GLoRA, full diffs) by name, and any key that matches none of the above (listed).
//
// The factor of a module (lora_math.h has the deltas):
// - LoRA: a `.scale` tensor when present, else alpha / rank (rank = rows of A), alpha from the
//   `.alpha` tensor, else from diffusers' `lora_adapter_metadata` header entry (lora_alpha,
//   alpha_pattern), else 1;
// - LoKr: alpha / dim when a half is decomposed (dim: the rank of the decomposed half, w2's when
//   both are), else 1, as LyCORIS and ComfyUI do;
// - LoHa: alpha / rank (rank = rows of hada_w1_b), else 1.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace fluxrt::models {

// Modules of FLUX.1's text encoders are named these + the CLIPTextModel / T5EncoderModel module.
inline constexpr const char* kClipTextModulePrefix = "text_encoder.";
inline constexpr const char* kT5TextModulePrefix = "text_encoder_2.";

// What a module holds: a plain low-rank pair, a Kronecker product, a Hadamard product of two
// low-rank pairs. DoRA is not a kind: any of them may carry a magnitude.
enum class LoraKind { Lora, LoKr, LoHa };
const char* lora_kind_name(LoraKind kind);  // "lora", "lokr", "loha"

struct LoraModule {
  std::string key;     // the stored key stem, for messages: "lora_unet_double_blocks_0_img_attn_qkv"
  std::string module;  // normalised: "double_blocks.0.img_attn.qkv", "transformer_blocks.0.attn.to_q",
                       // "text_encoder.encoder.layers.0.mlp.fc1",
                       // "text_encoder_2.encoder.block.0.layer.1.DenseReluDense.wo"
  LoraKind kind = LoraKind::Lora;
  Tensor down;  // LoRA: A [r, in], as stored
  Tensor up;    // LoRA: B [out, r], as stored
  // LoKr: w1 [a, b] (or w1_a [a, r] @ w1_b [r, b]) and w2 [c, d] (or w2_a @ w2_b); delta
  // kron(w1, w2) [a*c, b*d]. LoHa: (w1_a [out, r] @ w1_b [r, in]) * (w2_a @ w2_b), elementwise.
  Tensor w1, w1_a, w1_b, w2, w2_a, w2_b;
  // DoRA magnitude: [out] or [out, 1] normalises each output row (PEFT, LyCORIS wd_on_out),
  // [1, in] each input column (LyCORIS' other axis); undefined: no DoRA.
  Tensor magnitude;
  bool magnitude_eps = false;  // LyCORIS / ComfyUI add f32 epsilon to the norm; PEFT does not
  std::optional<float> alpha;
  std::optional<float> scale;  // a `.scale` tensor: the factor itself
  // LoRA: rows of A; LoKr: the decomposed half's rank (0 when neither is); LoHa: rows of w1_b.
  int64_t rank() const;
  // The delta's shape [out, in].
  Shape delta_shape() const;
  // What multiplies the product (the header says per kind).
  float factor() const;
  bool dora() const { return magnitude.defined(); }
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
