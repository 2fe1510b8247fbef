#pragma once
// The AutoencoderKL body that the FLUX.1 and FLUX.2 autoencoders share (flux-reference.md 4.1),
// NCHW: diffusers Encoder / Decoder with ResnetBlock2D levels, the UNetMidBlock2D (resnet, one-head
// attention over all pixels, resnet), asymmetric-pad downsampling, nearest-2x upsampling, optional
// quant_conv / post_quant_conv, and tiling (how a pass runs: vae_tiling_plan.h). The model wrappers (flux1_vae.h, flux2_vae.h) add their
// latent (de)normalisation and layout around it.
//
// Canonical tensor names are the diffusers ones; BFL `ae.safetensors` names go through
// map_bfl_vae_names. Activations (and conv/linear weights) are in AutoencoderKLOptions::dtype,
// bf16 by default; every convolution and norm accumulates in f32 (docs/numerics.md).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/device.h"
#include "core/tensor.h"
#include "models/vae/vae_tiling_plan.h"
#include "models/weight_binder.h"

namespace fluxrt::models {

// The architecture fields of a diffusers AutoencoderKL(-Flux2) vae/config.json. Defaults are the
// shared FLUX shape; latent_channels and the quant convs differ per model (set by the wrappers).
struct AutoencoderKLConfig {
  int in_channels = 3;
  int out_channels = 3;
  std::vector<int> block_out_channels{128, 256, 512, 512};
  std::vector<int> decoder_block_out_channels;  // empty: block_out_channels
  int layers_per_block = 2;
  int latent_channels = 16;
  int norm_num_groups = 32;
  float norm_eps = 1e-6f;  // GroupNorm eps of every resnet/attention/out norm (not in config.json)
  bool use_quant_conv = false;
  bool use_post_quant_conv = false;
  bool mid_block_add_attention = true;

  const std::vector<int>& decoder_channels() const {
    return decoder_block_out_channels.empty() ? block_out_channels : decoder_block_out_channels;
  }
  int spatial_factor() const { return 1 << (static_cast<int>(block_out_channels.size()) - 1); }  // 8

  // Reads the architecture fields present in `j` (a parsed config.json) over the current values and
  // validates them; Format / Unsupported errors name `origin`.
  void read_json_fields(const nlohmann::json& j, const std::string& origin);
  void validate(const std::string& origin) const;
};

struct AutoencoderKLOptions {
  DType dtype = DType::BF16;  // activations and conv/linear weights; F32 selectable
  Device device = Device::cpu();
  bool load_encoder = true;   // false: encoder tensors are ignored (txt2img only needs the decoder)
  TilingOptions tiling;
};

class AutoencoderKL {
 public:
  // Binds the encoder/decoder tensors (diffusers names) through `binder`; with
  // options.load_encoder false the encoder and quant_conv tensors are ignored instead. The caller
  // binds its own extra tensors and calls binder.finish().
  AutoencoderKL(const AutoencoderKLConfig& config, const AutoencoderKLOptions& options, WeightBinder& binder);
  AutoencoderKL(AutoencoderKL&&) noexcept;
  AutoencoderKL& operator=(AutoencoderKL&&) noexcept;
  ~AutoencoderKL();

  // The tensors a config implies, in binding order: the decoder's (with post_quant_conv) and/or the
  // encoder's (with quant_conv). For synthetic weights.
  static std::vector<std::pair<std::string, Shape>> tensor_shapes(const AutoencoderKLConfig& config, bool decoder,
                                                                  bool encoder);

  const AutoencoderKLConfig& config() const;
  const AutoencoderKLOptions& options() const;
  void set_tiling(const TilingOptions& tiling);
  bool has_encoder() const;

  // post_quant_conv + Decoder: z [B, latent, h, w] -> [B, out, 8h, 8w] in options().dtype; tiled
  // when the tiling options say so. `what` names the caller in error messages.
  Tensor decode(const Tensor& z, const char* what = "vae decode") const;
  // Encoder + quant_conv, then DiagonalGaussianDistribution.mode() (the mean):
  // x [B, in, H, W] (H, W multiples of 8) -> [B, latent, H/8, W/8].
  Tensor encode_mode(const Tensor& image, const char* what = "vae encode") const;
  // Encoder + quant_conv output before the split: [B, 2 * latent, H/8, W/8], mean then log-variance
  // (unclamped), for pipelines that sample the posterior as diffusers' img2img does.
  Tensor encode_moments(const Tensor& image, const char* what = "vae encode") const;

  bool decode_would_tile(int64_t batch, int64_t height, int64_t width) const;
  bool encode_would_tile(int64_t batch, int64_t height, int64_t width) const;
  // The decision above with its grid and the numbers behind it (image sizes in pixels).
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
  std::unique_ptr<Impl> impl_;
};

// BFL ae.safetensors names -> diffusers names (flux-reference.md 4.4): down/up/mid renames, the
// reversed decoder level index, q/k/v/proj_out [C, C, 1, 1] -> to_q/to_k/to_v/to_out.0 [C, C],
// encoder.quant_conv / decoder.post_quant_conv -> quant_conv / post_quant_conv.
// Tensors already in diffusers naming pass through unchanged.
TensorStore map_bfl_vae_names(const TensorStore& store);
bool is_bfl_vae_layout(const TensorStore& store);

// The weights of a VAE `path`: a diffusers vae/ folder (config.json + safetensors), a pipeline
// folder (its vae/), or a single checkpoint file (BFL ae.safetensors, or a full file with the VAE
// under "vae.", "first_stage_model." or "ae."). Sets `config_json` to the folder's config.json
// when there is one (empty otherwise). Format error when no decoder.conv_in.weight is found.
TensorStore load_vae_store(const std::string& path, std::string& config_json, const char* what);

// Random weights for the named shapes, deterministic in `seed`: conv/linear weights ~
// U(-1, 1)/sqrt(fan_in), norm scales near 1, biases small.
void add_synthetic_vae_tensors(TensorStore& store, const std::vector<std::pair<std::string, Shape>>& shapes,
                               DType dtype, uint64_t& state);
// One uniform number in [-1, 1) from a splitmix64 state.
float synthetic_uniform(uint64_t& state);

// VaeImageProcessor.postprocess(output_type="np") then (x * 255).round().astype(uint8):
// (x * 0.5 + 0.5).clamp(0, 1) in the image's dtype, then f32 * 255 rounded half to even.
// image [B, 3, H, W] -> [B, H, W, 3] uint8.
Tensor postprocess_to_uint8(const Tensor& image);

}  // namespace fluxrt::models
