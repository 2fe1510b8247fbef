// FLUX.1 autoencoder: config, latent scaling/shift around the shared AutoencoderKL body.
#include "models/vae/flux1_vae.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "ops/elementwise.h"

namespace fluxrt::models {

Flux1VaeConfig Flux1VaeConfig::from_json_text(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(ErrorCode::Format, "{}: not valid JSON ({})", origin, e.what());
  }
  if (!j.is_object()) fail(ErrorCode::Format, "{}: not a JSON object", origin);
  Flux1VaeConfig c;
  try {
    if (auto it = j.find("_class_name"); it != j.end() && it->is_string() && *it != "AutoencoderKL")
      fail(ErrorCode::Unsupported, "{}: _class_name {} is not the FLUX.1 AutoencoderKL", origin, it->get<std::string>());
    // FLUX.1's config writes both; null means "not used" in diffusers (scaling 1, no shift).
    if (auto it = j.find("scaling_factor"); it != j.end() && !it->is_null()) c.scaling_factor = it->get<float>();
    if (auto it = j.find("shift_factor"); it != j.end()) c.shift_factor = it->is_null() ? 0.0f : it->get<float>();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(ErrorCode::Format, "{}: bad field type ({})", origin, e.what());
  }
  c.read_json_fields(j, origin);
  FLUXRT_CHECK(c.scaling_factor != 0.0f, ErrorCode::Format, "{}: scaling_factor must not be 0", origin);
  return c;
}

Flux1VaeConfig Flux1VaeConfig::from_json_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  FLUXRT_CHECK(f.good(), ErrorCode::Io, "cannot open VAE config {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), path);
}

Flux1Vae Flux1Vae::from_store(const TensorStore& raw, const Flux1VaeConfig& config, const Flux1VaeOptions& options) {
  const TensorStore store = map_bfl_vae_names(raw);
  WeightBinder binder(store, "vae");
  AutoencoderKL core(config, options, binder);
  binder.finish();
  return Flux1Vae(config, std::move(core));
}

Flux1Vae Flux1Vae::load(const std::string& path, const Flux1VaeOptions& options, std::optional<Flux1VaeConfig> config) {
  std::string config_json;
  TensorStore store = load_vae_store(path, config_json, "FLUX.1 VAE");
  if (!config && !config_json.empty()) config = Flux1VaeConfig::from_json_file(config_json);
  return from_store(store, config.value_or(Flux1VaeConfig{}), options);
}

// torch computes `bf16 / scalar` and `bf16 + scalar` in f32 and rounds each result to bf16 (the
// Python scalar is not rounded first); the latents are small, so the same is done here in f32.
Tensor Flux1Vae::unscale_latents(const Tensor& z) const {
  const DType dt = z.dtype();
  Tensor y = ops::scale(z.to(DType::F32), 1.0f / config_.scaling_factor).to(dt).to(DType::F32);  // [B, 16, h, w]
  ops::add_(y, to_device(Tensor::full({1}, DType::F32, config_.shift_factor), y.device()));                           // [B, 16, h, w]
  return y.to(dt);
}

Tensor Flux1Vae::scale_latents(const Tensor& z) const {
  const DType dt = z.dtype();
  const Tensor shift = to_device(Tensor::full({1}, DType::F32, -config_.shift_factor), z.device());
  Tensor y = ops::add(z.to(DType::F32), shift).to(dt);  // [B, 16, h, w]
  return ops::scale(y.to(DType::F32), config_.scaling_factor).to(dt);                                 // [B, 16, h, w]
}

Tensor Flux1Vae::decode(const Tensor& z) const { return core_.decode(z, "flux1 vae decode"); }

Tensor Flux1Vae::decode_latents(const Tensor& z) const {
  FLUXRT_CHECK(z.defined() && z.dim() == 4 && z.size(1) == config_.latent_channels, ErrorCode::InvalidArgument,
               "flux1 vae decode_latents: z must be [B, {}, h, w], got {}", config_.latent_channels,
               z.defined() ? z.shape().str() : "undefined");
  return decode(unscale_latents(z.to(options().dtype)));  // [B, 3, 8h, 8w]
}

Tensor Flux1Vae::encode_mode(const Tensor& image) const { return core_.encode_mode(image, "flux1 vae encode"); }

Tensor Flux1Vae::encode_latents(const Tensor& image) const {
  return scale_latents(encode_mode(image));  // [B, 16, H/8, W/8]
}

TensorStore make_synthetic_flux1_vae(const Flux1VaeConfig& config, DType dtype, uint64_t seed) {
  TensorStore store;
  store.set_description("synthetic FLUX.1 VAE");
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x7654321ull;
  add_synthetic_vae_tensors(store, AutoencoderKL::tensor_shapes(config, true, true), dtype, state);
  return store;
}

}  // namespace fluxrt::models
