#pragma once
// FLUX.2 transformer hyper-parameters (flux-reference.md section 1.1): from a diffusers
// transformer/config.json, from a named preset, or detected from the weights themselves.
#include <cstdint>
#include <string>
#include <vector>

namespace fluxrt::models {

class TensorStore;

struct Flux2Config {
  std::string variant = "custom";  // flux.2-klein-4b, flux.2-klein-9b, flux.2-klein-base-4b/-9b or custom
  int64_t hidden = 3072;           // D = heads * head_dim
  int64_t heads = 24;
  int64_t head_dim = 128;
  int64_t double_blocks = 5;
  int64_t single_blocks = 20;
  int64_t in_channels = 128;       // packed latent channels (32 x 2 x 2)
  int64_t out_channels = 128;
  int64_t context_dim = 7680;      // joint_attention_dim: 3 x the Qwen3 hidden size
  int64_t mlp_hidden = 9216;       // SwiGLU hidden M (= mlp_ratio * D); the in-projection is 2M wide
  int64_t timestep_channels = 256;
  std::vector<int64_t> axes_dim{32, 32, 32, 32};
  double rope_theta = 2000.0;
  float eps = 1e-6f;

  // Checks internal consistency (D = H * d, axes sum to d, ...); InvalidArgument naming `where`.
  void validate(const std::string& where) const;
  // Parameter count implied by the shapes (flux-reference.md section 1.2).
  int64_t parameter_count() const;
  // GEMM + attention FLOPs of one forward at batch 1 (flux-reference.md section 6 counting rule).
  double flops_per_forward(int64_t image_tokens, int64_t text_tokens) const;
  // The same with `reference_tokens` cached keys and values (klein-9B-KV): every attention's
  // queries also meet them; the reference pass itself (once per request) is not counted.
  double flops_per_forward_with_reference_kv(int64_t image_tokens, int64_t text_tokens,
                                             int64_t reference_tokens) const;
};

// Presets: "flux.2-klein-4b", "flux.2-klein-9b", "flux.2-klein-base-4b", "flux.2-klein-base-9b".
// Unknown names are an InvalidArgument error listing the known ones.
Flux2Config flux2_preset(const std::string& variant);

// diffusers Flux2Transformer2DModel config.json. Format error naming the file on bad fields;
// guidance_embeds = true (FLUX.2-dev) and patch_size != 1 are Unsupported.
Flux2Config flux2_config_from_json(const std::string& path);

// Detection from a canonical-named store (see flux2_names.h): widths from img_in / txt_in /
// img_mlp / final_layer, block counts from the highest block indices. The variant is named when
// the shapes match klein-4B/9B; the distilled and base checkpoints share shapes, so detection
// reports the distilled name (config.json / model_index.json is what tells them apart).
Flux2Config flux2_config_detect(const TensorStore& canonical);

}  // namespace fluxrt::models
