#pragma once
// The FLUX.2 autoencoder (diffusers AutoencoderKLFlux2 / BFL flux2 `ae.safetensors`), NCHW.
//
//   auto vae = Flux2Vae::load("…/FLUX.2-klein-4B/vae", {});          // folder or BFL ae file
//   Tensor img = vae.decode_latents(z_packed);   // [B, 128, H/16, W/16] normalised -> [B, 3, H, W]
//   Tensor u8  = postprocess_to_uint8(img);      // [B, H, W, 3] uint8, like VaeImageProcessor
//   Tensor ref = vae.encode_latents(image);      // [B, 3, H, W] in [-1, 1] -> [B, 128, H/16, W/16]
//
// The encoder/decoder body is the shared AutoencoderKL (autoencoder_kl.h: diffusers names, BFL map,
// dtype, tiling); this wrapper adds quant convs, the 2x2 patchify and the BatchNorm statistics.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "models/vae/autoencoder_kl.h"
#include "models/weight_binder.h"

namespace fluxrt::models {

// vae/config.json of AutoencoderKLFlux2; the defaults are the class defaults (= the klein VAE).
struct Flux2VaeConfig : AutoencoderKLConfig {
  float batch_norm_eps = 1e-4f;
  int patch_size = 2;  // (2, 2); other patch sizes are rejected

  Flux2VaeConfig() {
    latent_channels = 32;
    use_quant_conv = true;
    use_post_quant_conv = true;
  }
  int packed_channels() const { return latent_channels * patch_size * patch_size; }  // 128

  static Flux2VaeConfig from_json_file(const std::string& path);
  static Flux2VaeConfig from_json_text(const std::string& text, const std::string& origin = "config.json");
};

using Flux2VaeOptions = AutoencoderKLOptions;

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
  // The same decision with the tile grid and the estimate/budget behind it (autoencoder_kl.h).
  TilePlan decode_tile_plan(int64_t batch, int64_t height, int64_t width) const;
  TilePlan encode_tile_plan(int64_t batch, int64_t height, int64_t width) const;
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

// Random weights of the shapes `config` implies (diffusers names, `dtype`), deterministic in
// `seed`; conv weights ~ U(-1, 1)/sqrt(fan_in), norm scales near 1, BatchNorm var in [0.5, 3.5].
TensorStore make_synthetic_flux2_vae(const Flux2VaeConfig& config, DType dtype, uint64_t seed = 0);

}  // namespace fluxrt::models
