#pragma once
// The FLUX.2 autoencoder (diffusers AutoencoderKLFlux2 / BFL flux2 `ae.safetensors`), NCHW.
//
//   auto vae = Flux2Vae::load("…/FLUX.2-klein-4B/vae", {});          // folder or BFL ae file
//   Tensor img = vae.decode_latents(z_packed);   // [B, 128, H/16, W/16] normalised -> [B, 3, H, W]
//   Tensor u8  = postprocess_to_uint8(img);      // [B, H, W, 3] uint8, like VaeImageProcessor
//   Tensor ref = vae.encode_latents(image);      // [B, 3, H, W] in [-1, 1] -> [B, 128, H/16, W/16]
//
// Canonical tensor names are the diffusers ones; the BFL layout goes through map_bfl_vae_names.
// Activations (and conv/linear weights) are in Flux2VaeOptions::dtype, bf16 by default; every
// convolution and norm accumulates in f32 (docs/numerics.md). Large images are decoded / encoded
// in overlapping tiles blended with linear ramps (see TilingOptions).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "models/weight_binder.h"

namespace fluxrt::models {

// vae/config.json of AutoencoderKLFlux2; the defaults are the class defaults (= the klein VAE).
struct Flux2VaeConfig {
  int in_channels = 3;
  int out_channels = 3;
  std::vector<int> block_out_channels{128, 256, 512, 512};
  std::vector<int> decoder_block_out_channels;  // empty: block_out_channels
  int layers_per_block = 2;
  int latent_channels = 32;
  int norm_num_groups = 32;
  float norm_eps = 1e-6f;  // GroupNorm eps of every resnet/attention/out norm (not in config.json)
  float batch_norm_eps = 1e-4f;
  bool use_quant_conv = true;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;
  int patch_size = 2;  // (2, 2); other patch sizes are rejected

  const std::vector<int>& decoder_channels() const {
    return decoder_block_out_channels.empty() ? block_out_channels : decoder_block_out_channels;
  }
  int packed_channels() const { return latent_channels * patch_size * patch_size; }  // 128
  int spatial_factor() const { return 1 << (static_cast<int>(block_out_channels.size()) - 1); }  // 8

  static Flux2VaeConfig from_json_file(const std::string& path);
  static Flux2VaeConfig from_json_text(const std::string& text, const std::string& origin = "config.json");
};

enum class TilingMode { Auto, Always, Never };

// Overlapping tiles, blended with linear ramps over the overlap (weights normalised per pixel,
// so the seam is a smooth cross-fade rather than diffusers' crop-and-blend of half the overlap).
struct TilingOptions {
  TilingMode mode = TilingMode::Auto;
  int tile_pixels = 512;    // tile edge in image pixels (multiple of 16)
  int overlap_pixels = 128; // overlap between neighbouring tiles in image pixels (multiple of 16)
  // Auto tiles when the estimated untiled activation memory exceeds this (bytes).
  size_t memory_budget_bytes = size_t{6} << 30;
};

struct Flux2VaeOptions {
  DType dtype = DType::BF16;  // activations and conv/linear weights; F32 selectable
  Device device = Device::cpu();
  bool load_encoder = true;   // false: encoder tensors are ignored (txt2img only needs the decoder)
  TilingOptions tiling;
};

class Flux2Vae {
 public:
  // `path`: a diffusers vae/ folder (config.json + safetensors), a pipeline folder (its vae/),
  // or a BFL ae.safetensors file (config = defaults unless given). The layout is detected by name.
  static Flux2Vae load(const std::string& path, const Flux2VaeOptions& options,
                       std::optional<Flux2VaeConfig> config = std::nullopt);
  // From canonical (diffusers) names; a BFL-named store is mapped first.
  static Flux2Vae from_store(const TensorStore& store, const Flux2VaeConfig& config, const Flux2VaeOptions& options);

  Flux2Vae(Flux2Vae&&) noexcept;
  Flux2Vae& operator=(Flux2Vae&&) noexcept;
  ~Flux2Vae();

  const Flux2VaeConfig& config() const;
  const Flux2VaeOptions& options() const;
  void set_tiling(const TilingOptions& tiling);
  bool has_encoder() const;

  // Pipeline-level decode (Flux2KleinPipeline): z * sqrt(var + eps) + mean, unpatchify, decode.
  // z [B, 128, h, w] -> image [B, 3, 16h, 16w] in [-1, 1] nominally, options().dtype.
  Tensor decode_latents(const Tensor& z_packed) const;
  // AutoencoderKLFlux2.decode: z [B, 32, H/8, W/8] -> [B, 3, H, W] (post_quant_conv + decoder).
  Tensor decode(const Tensor& z) const;
  // AutoencoderKLFlux2.encode(x).latent_dist.mode(): x [B, 3, H, W] -> mean [B, 32, H/8, W/8].
  Tensor encode_mode(const Tensor& image) const;
  // Flux2KleinPipeline._encode_vae_image (sample_mode="argmax"): mode, patchify, BN normalise.
  // x [B, 3, H, W] (H, W multiples of 16) -> [B, 128, H/16, W/16].
  Tensor encode_latents(const Tensor& image) const;

  // Latent (de)normalisation with the BatchNorm running statistics on [B, 128, h, w].
  Tensor normalize_latents(const Tensor& z_packed) const;
  Tensor denormalize_latents(const Tensor& z_packed) const;

  // Whether decode/encode of this size would tile under the current options.
  bool decode_would_tile(int64_t batch, int64_t height, int64_t width) const;
  bool encode_would_tile(int64_t batch, int64_t height, int64_t width) const;
  // Estimated untiled peak activation bytes for an output/input image of this size.
  size_t estimate_decode_bytes(int64_t batch, int64_t height, int64_t width) const;
  size_t estimate_encode_bytes(int64_t batch, int64_t height, int64_t width) const;

  // FLOPs (2 per MAC, convolutions + attention) of one untiled decode / encode at this image size.
  double decode_flops(int64_t batch, int64_t height, int64_t width) const;
  double encode_flops(int64_t batch, int64_t height, int64_t width) const;

  struct Impl;

 private:
  explicit Flux2Vae(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// BFL ae.safetensors names -> diffusers names (flux-reference.md 4.4): down/up/mid renames, the
// reversed decoder level index, q/k/v/proj_out [C, C, 1, 1] -> to_q/to_k/to_v/to_out.0 [C, C].
// Tensors already in diffusers naming pass through unchanged.
TensorStore map_bfl_vae_names(const TensorStore& store);
bool is_bfl_vae_layout(const TensorStore& store);

// Random weights of the shapes `config` implies (diffusers names, `dtype`), deterministic in
// `seed`; conv weights ~ U(-1, 1)/sqrt(fan_in), norm scales near 1, BatchNorm var in [0.5, 3.5].
TensorStore make_synthetic_flux2_vae(const Flux2VaeConfig& config, DType dtype, uint64_t seed = 0);

// VaeImageProcessor.postprocess(output_type="np") then (x * 255).round().astype(uint8):
// (x * 0.5 + 0.5).clamp(0, 1) in the image's dtype, then f32 * 255 rounded half to even.
// image [B, 3, H, W] -> [B, H, W, 3] uint8.
Tensor postprocess_to_uint8(const Tensor& image);

}  // namespace fluxrt::models
