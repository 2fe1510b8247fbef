#pragma once
// FLUX.1 transformer hyper-parameters (flux-reference.md section 1.1): from a diffusers
// transformer/config.json, from a named preset, or detected from the weights themselves.
#include <cstdint>
#include <string>
#include <vector>

namespace fluxrt::models {

class TensorStore;

struct Flux1Config {
  std::string variant = "custom";  // flux.1-dev, flux.1-schnell or custom
  int64_t hidden = 3072;           // D = heads * head_dim
  int64_t heads = 24;
  int64_t head_dim = 128;
  int64_t double_blocks = 19;
  int64_t single_blocks = 38;
  int64_t in_channels = 64;        // packed latent channels (16 x 2 x 2)
  int64_t out_channels = 64;
  int64_t context_dim = 4096;      // joint_attention_dim: T5-XXL hidden size
  int64_t pooled_dim = 768;        // pooled_projection_dim: CLIP-L pooled output
  int64_t mlp_hidden = 12288;      // GELU-tanh MLP hidden size (4 D)
  int64_t timestep_channels = 256;
  bool guidance = true;            // guidance_in / guidance_embedder present (dev)
  std::vector<int64_t> axes_dim{16, 56, 56};
  double rope_theta = 10000.0;
  float eps = 1e-6f;
  // Synthetic weights only (benchmarks of the real shapes on machines that cannot hold 12B
  // parameters): every double block binds one shared weight set and every single block another.
  // Same shapes, FLOPs and weight bytes streamed per block as the real model (a block's weights are
  // hundreds of MB and never cache-resident), about 1 GB resident instead of 24 GB.
  bool shared_block_weights = false;

  // Checks internal consistency (D = H * d, axes sum to d, ...); InvalidArgument naming `where`.
  void validate(const std::string& where) const;
  // Parameter count implied by the shapes, biases included (flux-reference.md section 1.2).
  int64_t parameter_count() const;
  // GEMM + attention FLOPs of one forward at batch 1 (flux-reference.md section 6 counting rule).
  double flops_per_forward(int64_t image_tokens, int64_t text_tokens) const;
};

// Presets: "flux.1-dev", "flux.1-schnell"; with kFlux1SharedBlocksSuffix appended (e.g.
// "flux.1-dev-shared-blocks") the same shapes with shared_block_weights set and `variant` the base
// name. Unknown names are an InvalidArgument error listing them.
inline constexpr const char* kFlux1SharedBlocksSuffix = "-shared-blocks";
Flux1Config flux1_preset(const std::string& variant);

// diffusers FluxTransformer2DModel config.json. Format error naming the file on bad fields;
// patch_size != 1 is Unsupported.
Flux1Config flux1_config_from_json(const std::string& path);

// Detection from a canonical-named store (see flux1_names.h): widths from img_in / txt_in /
// vector_in / final_layer, block counts from the highest block indices, dev when guidance_in is
// present. The RoPE axes are only known for head_dim 128 ((16, 56, 56)); other head dims need a
// config.json (Unsupported otherwise).
Flux1Config flux1_config_detect(const TensorStore& canonical);

}  // namespace fluxrt::models
