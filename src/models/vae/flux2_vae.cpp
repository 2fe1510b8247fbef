// FLUX.2 autoencoder: config, quant convs around the shared AutoencoderKL body, 2x2
// (un)patchify and the BatchNorm latent (de)normalisation.
#include "models/vae/flux2_vae.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "ops/vae_ops.h"

namespace fluxrt::models {
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// config.json

Flux2VaeConfig Flux2VaeConfig::from_json_text(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(ErrorCode::Format, "{}: not valid JSON ({})", origin, e.what());
  }
  Flux2VaeConfig c;
  try {
    if (j.contains("batch_norm_eps")) c.batch_norm_eps = j["batch_norm_eps"].get<float>();
    if (j.contains("patch_size")) {
      auto p = j["patch_size"].get<std::vector<int>>();
      if (p.size() != 2 || p[0] != 2 || p[1] != 2)
        fail(ErrorCode::Unsupported, "{}: patch_size must be [2, 2]", origin);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(ErrorCode::Format, "{}: bad field type ({})", origin, e.what());
  }
  c.read_json_fields(j, origin);
  return c;
}

Flux2VaeConfig Flux2VaeConfig::from_json_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  FLUXRT_CHECK(f.good(), ErrorCode::Io, "cannot open VAE config {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), path);
}

// ---------------------------------------------------------------------------------------------
// Model

struct Flux2Vae::Impl {
  Flux2VaeConfig config;
  AutoencoderKL core;
  Tensor bn_mean, bn_var;  // f32 [128]
};

Flux2Vae::Flux2Vae(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Flux2Vae::Flux2Vae(Flux2Vae&&) noexcept = default;
Flux2Vae& Flux2Vae::operator=(Flux2Vae&&) noexcept = default;
Flux2Vae::~Flux2Vae() = default;

Flux2Vae Flux2Vae::from_store(const TensorStore& raw, const Flux2VaeConfig& config, const Flux2VaeOptions& options) {
  const TensorStore store = map_bfl_vae_names(raw);
  WeightBinder binder(store, "vae");
  AutoencoderKL core(config, options, binder);
  // BatchNorm statistics (f32; num_batches_tracked is a training counter)
  Tensor bn_mean = binder.require("bn.running_mean", {config.packed_channels()}, DType::F32);
  Tensor bn_var = binder.require("bn.running_var", {config.packed_channels()}, DType::F32);
  binder.ignore_prefix("bn.num_batches_tracked");
  binder.finish();
  return Flux2Vae(std::make_unique<Impl>(
      Impl{config, std::move(core), to_device(bn_mean, options.device), to_device(bn_var, options.device)}));
}

Flux2Vae Flux2Vae::load(const std::string& path, const Flux2VaeOptions& options, std::optional<Flux2VaeConfig> config) {
  std::string config_json;
  TensorStore store = load_vae_store(path, config_json, "FLUX.2 VAE");
  if (!config && !config_json.empty()) config = Flux2VaeConfig::from_json_file(config_json);
  return from_store(store, config.value_or(Flux2VaeConfig{}), options);
}

const Flux2VaeConfig& Flux2Vae::config() const { return impl_->config; }
const Flux2VaeOptions& Flux2Vae::options() const { return impl_->core.options(); }
void Flux2Vae::set_tiling(const TilingOptions& tiling) { impl_->core.set_tiling(tiling); }
bool Flux2Vae::has_encoder() const { return impl_->core.has_encoder(); }

Tensor Flux2Vae::normalize_latents(const Tensor& z) const {
  return ops::latent_normalize(to_device(z, impl_->bn_mean.device()), impl_->bn_mean, impl_->bn_var, impl_->config.batch_norm_eps);  // [B, 128, h, w]
}
Tensor Flux2Vae::denormalize_latents(const Tensor& z) const {
  return ops::latent_denormalize(to_device(z, impl_->bn_mean.device()), impl_->bn_mean, impl_->bn_var, impl_->config.batch_norm_eps);  // [B, 128, h, w]
}

size_t Flux2Vae::estimate_decode_bytes(int64_t b, int64_t h, int64_t w) const {
  return impl_->core.estimate_decode_bytes(b, h, w);
}
size_t Flux2Vae::estimate_encode_bytes(int64_t b, int64_t h, int64_t w) const {
  return impl_->core.estimate_encode_bytes(b, h, w);
}
bool Flux2Vae::decode_would_tile(int64_t b, int64_t h, int64_t w) const { return impl_->core.decode_would_tile(b, h, w); }
bool Flux2Vae::encode_would_tile(int64_t b, int64_t h, int64_t w) const { return impl_->core.encode_would_tile(b, h, w); }
TilePlan Flux2Vae::decode_tile_plan(int64_t b, int64_t h, int64_t w) const { return impl_->core.decode_tile_plan(b, h, w); }
TilePlan Flux2Vae::encode_tile_plan(int64_t b, int64_t h, int64_t w) const { return impl_->core.encode_tile_plan(b, h, w); }
double Flux2Vae::decode_flops(int64_t b, int64_t h, int64_t w) const { return impl_->core.decode_flops(b, h, w); }
double Flux2Vae::encode_flops(int64_t b, int64_t h, int64_t w) const { return impl_->core.encode_flops(b, h, w); }

Tensor Flux2Vae::decode(const Tensor& z) const { return impl_->core.decode(z, "vae decode"); }

Tensor Flux2Vae::decode_latents(const Tensor& z_packed) const {
  FLUXRT_CHECK(z_packed.defined() && z_packed.dim() == 4 && z_packed.size(1) == impl_->config.packed_channels(),
               ErrorCode::InvalidArgument, "vae decode_latents: z must be [B, {}, h, w], got {}",
               impl_->config.packed_channels(), z_packed.defined() ? z_packed.shape().str() : "undefined");
  Tensor z = denormalize_latents(z_packed.to(impl_->core.options().dtype));         // [B, 128, h, w]
  z = ops::unpatchify_2x2(z);                                                 // [B, 32, 2h, 2w]
  return decode(z);                                                           // [B, 3, 16h, 16w]
}

Tensor Flux2Vae::encode_mode(const Tensor& image) const { return impl_->core.encode_mode(image, "vae encode"); }

Tensor Flux2Vae::encode_latents(const Tensor& image) const {
  // One packed token covers 2 x spatial_factor pixels (16 for the released 4-level VAEs).
  const int64_t multiple = 2 * impl_->config.spatial_factor();
  FLUXRT_CHECK(image.dim() == 4 && image.size(2) % multiple == 0 && image.size(3) % multiple == 0,
               ErrorCode::InvalidArgument, "vae encode_latents: H and W must be multiples of {}, got {}", multiple,
               image.shape().str());
  Tensor mode = encode_mode(image);                                           // [B, 32, H/8, W/8]
  Tensor packed = ops::patchify_2x2(mode);                                    // [B, 128, H/16, W/16]
  return normalize_latents(packed);                                           // [B, 128, H/16, W/16]
}

// ---------------------------------------------------------------------------------------------
// Synthetic weights

TensorStore make_synthetic_flux2_vae(const Flux2VaeConfig& config, DType dtype, uint64_t seed) {
  TensorStore store;
  store.set_description("synthetic FLUX.2 VAE");
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
  add_synthetic_vae_tensors(store, AutoencoderKL::tensor_shapes(config, true, false), dtype, state);
  Tensor mean = Tensor::empty({config.packed_channels()}, DType::F32);
  Tensor var = Tensor::empty({config.packed_channels()}, DType::F32);
  for (int64_t i = 0; i < mean.numel(); ++i) mean.data<float>()[i] = 0.5f * synthetic_uniform(state);
  for (int64_t i = 0; i < var.numel(); ++i) var.data<float>()[i] = 2.0f + 1.5f * synthetic_uniform(state);
  store.add("bn.running_mean", mean, "synthetic");
  store.add("bn.running_var", var, "synthetic");
  add_synthetic_vae_tensors(store, AutoencoderKL::tensor_shapes(config, false, true), dtype, state);
  return store;
}

}  // namespace fluxrt::models
