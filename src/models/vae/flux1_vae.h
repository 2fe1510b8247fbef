#pragma once
// The FLUX.1 autoencoder (diffusers AutoencoderKL with the FLUX.1 settings / BFL `ae.safetensors`
// of FLUX.1-dev and -schnell), NCHW: 16 latent channels, no quant convs, latent scaling 0.3611 and
// shift 0.1159 (flux-reference.md 4.2).
//
//   auto vae = Flux1Vae::load("…/FLUX.1-dev/vae", {});          // folder, pipeline folder or ae file
//   Tensor img = vae.decode_latents(z);    // [B, 16, H/8, W/8] scaled -> [B, 3, H, W] in [-1, 1]
//   Tensor u8  = postprocess_to_uint8(img);
//   Tensor z0  = vae.encode_latents(image); // [B, 3, H, W] -> (mode - shift) * scaling
//
// The encoder/decoder body is the shared AutoencoderKL (autoencoder_kl.h: diffusers names, BFL
// map, bf16 by default with f32 selectable, tiling).
#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "models/vae/autoencoder_kl.h"
#include "models/weight_binder.h"

namespace fluxrt::models {

// vae/config.json of the FLUX.1 AutoencoderKL; the defaults are FLUX.1's values.
struct Flux1VaeConfig : AutoencoderKLConfig {
  float scaling_factor = 0.3611f;
  float shift_factor = 0.1159f;

  Flux1VaeConfig() {
    latent_channels = 16;
    use_quant_conv = false;
    use_post_quant_conv = false;
  }

  // Fails with Format (malformed JSON, bad types, inconsistent channels) or Unsupported (another
  // activation, a `_class_name` that is not AutoencoderKL) naming the file.
  static Flux1VaeConfig from_json_file(const std::string& path);
  static Flux1VaeConfig from_json_text(const std::string& text, const std::string& origin = "config.json");
};

using Flux1VaeOptions = AutoencoderKLOptions;

class Flux1Vae {
 public:
  // `path`: a diffusers vae/ folder (config.json + safetensors), a pipeline folder (its vae/), or a
  // BFL ae.safetensors file (config = FLUX.1 defaults unless given). The layout is detected by name.
  static Flux1Vae load(const std::string& path, const Flux1VaeOptions& options = {},
                       std::optional<Flux1VaeConfig> config = std::nullopt);
  // From diffusers names; a BFL-named store is mapped first.
  static Flux1Vae from_store(const TensorStore& store, const Flux1VaeConfig& config, const Flux1VaeOptions& options);

  const Flux1VaeConfig& config() const { return config_; }
  const Flux1VaeOptions& options() const { return core_.options(); }
  void set_tiling(const TilingOptions& tiling) { core_.set_tiling(tiling); }
  bool has_encoder() const { return core_.has_encoder(); }
  const AutoencoderKL& core() const { return core_; }

  // FluxPipeline's decode: z / scaling_factor + shift_factor, then AutoencoderKL.decode.
  // z [B, 16, h, w] -> image [B, 3, 8h, 8w] in options().dtype.
  Tensor decode_latents(const Tensor& z) const;
  // AutoencoderKL.decode on unscaled latents: z [B, 16, h, w] -> [B, 3, 8h, 8w].
  Tensor decode(const Tensor& z) const;
  // AutoencoderKL.encode(x).latent_dist.mode(): x [B, 3, H, W] -> mean [B, 16, H/8, W/8].
  Tensor encode_mode(const Tensor& image) const;
  // (mode - shift_factor) * scaling_factor, the latents FLUX.1 img2img starts from (with the
  // posterior mean; diffusers' img2img samples the posterior, BFL's encode uses the mean).
  Tensor encode_latents(const Tensor& image) const;

  // (De)scaling alone, in the latent's dtype as diffusers does it on a bf16 tensor.
  Tensor scale_latents(const Tensor& z) const;    // (z - shift) * scaling
  Tensor unscale_latents(const Tensor& z) const;  // z / scaling + shift

 private:
  Flux1Vae(Flux1VaeConfig config, AutoencoderKL core) : config_(std::move(config)), core_(std::move(core)) {}
  Flux1VaeConfig config_;
  AutoencoderKL core_;
};

// Random weights of the shapes `config` implies (diffusers names, `dtype`), deterministic in `seed`.
TensorStore make_synthetic_flux1_vae(const Flux1VaeConfig& config, DType dtype, uint64_t seed = 0);

}  // namespace fluxrt::models
