// The AutoencoderKL helpers that need no model: its config.json fields, finding and loading a VAE
// checkpoint, the BFL name map, synthetic weights of given shapes, and the 8-bit post-processing
// of decoded images.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/vae/autoencoder_kl.h"

namespace fluxrt::models {
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// config.json fields

void AutoencoderKLConfig::read_json_fields(const nlohmann::json& j, const std::string& origin) {
  try {
    auto get_int = [&](const char* key, int& v) {
      if (j.contains(key) && !j[key].is_null()) v = j[key].get<int>();
    };
    auto get_bool = [&](const char* key, bool& v) {
      if (j.contains(key) && !j[key].is_null()) v = j[key].get<bool>();
    };
    get_int("in_channels", in_channels);
    get_int("out_channels", out_channels);
    get_int("layers_per_block", layers_per_block);
    get_int("latent_channels", latent_channels);
    get_int("norm_num_groups", norm_num_groups);
    get_bool("use_quant_conv", use_quant_conv);
    get_bool("use_post_quant_conv", use_post_quant_conv);
    get_bool("mid_block_add_attention", mid_block_add_attention);
    if (j.contains("block_out_channels"))
      block_out_channels = j["block_out_channels"].get<std::vector<int>>();
    if (j.contains("decoder_block_out_channels") && !j["decoder_block_out_channels"].is_null())
      decoder_block_out_channels = j["decoder_block_out_channels"].get<std::vector<int>>();
    if (j.contains("act_fn") && j["act_fn"].get<std::string>() != "silu")
      fail(ErrorCode::Unsupported, "{}: act_fn {} (only silu)", origin, j["act_fn"].get<std::string>());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(ErrorCode::Format, "{}: bad field type ({})", origin, e.what());
  }
  validate(origin);
}

void AutoencoderKLConfig::validate(const std::string& origin) const {
  FLUXRT_CHECK(!block_out_channels.empty() && decoder_channels().size() == block_out_channels.size(),
               ErrorCode::Format, "{}: block_out_channels / decoder_block_out_channels", origin);
  FLUXRT_CHECK(norm_num_groups > 0 && latent_channels > 0 && in_channels > 0 && out_channels > 0 &&
                   layers_per_block > 0,
               ErrorCode::Format, "{}: channel, group and layer counts must be positive", origin);
  for (int ch : block_out_channels)
    FLUXRT_CHECK(ch > 0 && ch % norm_num_groups == 0, ErrorCode::Format,
                 "{}: channel count {} not divisible by norm_num_groups {}", origin, ch, norm_num_groups);
  for (int ch : decoder_channels())
    FLUXRT_CHECK(ch > 0 && ch % norm_num_groups == 0, ErrorCode::Format,
                 "{}: channel count {} not divisible by norm_num_groups {}", origin, ch, norm_num_groups);
}

// ---------------------------------------------------------------------------------------------
// BFL name map

bool is_bfl_vae_layout(const TensorStore& store) {
  return store.contains("decoder.conv_in.weight") && !store.contains("decoder.conv_norm_out.weight") &&
         store.contains("decoder.norm_out.weight");
}

TensorStore map_bfl_vae_names(const TensorStore& store) {
  if (!is_bfl_vae_layout(store)) return store;
  // Number of decoder levels: the highest `decoder.up.<i>.` index + 1.
  int n_up = 0;
  for (const auto& n : store.names())
    if (n.rfind("decoder.up.", 0) == 0) n_up = std::max(n_up, std::stoi(n.substr(11)) + 1);
  auto replace = [](std::string s, const std::string& from, const std::string& to) {
    size_t p = s.find(from);
    if (p != std::string::npos) s.replace(p, from.size(), to);
    return s;
  };
  TensorStore out;
  out.set_description(store.description());
  for (const auto& name : store.names()) {
    std::string n = name;
    Tensor t = store.get(name);
    if (n.rfind("encoder.quant_conv.", 0) == 0)
      n = n.substr(8);  // quant_conv.*
    else if (n.rfind("decoder.post_quant_conv.", 0) == 0)
      n = n.substr(8);  // post_quant_conv.*
    n = replace(n, "encoder.down.", "encoder.down_blocks.");
    n = replace(n, ".downsample.", ".downsamplers.0.");
    n = replace(n, ".nin_shortcut.", ".conv_shortcut.");
    n = replace(n, ".mid.block_1.", ".mid_block.resnets.0.");
    n = replace(n, ".mid.block_2.", ".mid_block.resnets.1.");
    n = replace(n, ".mid.attn_1.norm.", ".mid_block.attentions.0.group_norm.");
    bool attn_proj = false;
    for (auto [b, d] : {std::pair{".mid.attn_1.q.", ".mid_block.attentions.0.to_q."},
                        std::pair{".mid.attn_1.k.", ".mid_block.attentions.0.to_k."},
                        std::pair{".mid.attn_1.v.", ".mid_block.attentions.0.to_v."},
                        std::pair{".mid.attn_1.proj_out.", ".mid_block.attentions.0.to_out.0."}}) {
      if (n.find(b) != std::string::npos) {
        n = replace(n, b, d);
        attn_proj = true;
      }
    }
    n = replace(n, ".norm_out.", ".conv_norm_out.");
    if (n.rfind("decoder.up.", 0) == 0) {
      const size_t dot = n.find('.', 11);
      const int level = std::stoi(n.substr(11, dot - 11));
      n = "decoder.up_blocks." + std::to_string(n_up - 1 - level) + n.substr(dot);
      n = replace(n, ".upsample.", ".upsamplers.0.");
    }
    n = replace(n, ".block.", ".resnets.");
    if (attn_proj && t.dim() == 4) t = t.reshape({t.size(0), t.size(1)});  // 1x1 conv -> Linear
    out.add(n, t, store.origin(name));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Loading

TensorStore load_vae_store(const std::string& path, std::string& config_json, const char* what) {
  std::string weights = path;
  config_json.clear();
  if (fs::is_directory(path)) {
    if (fs::exists(fs::path(path) / "model_index.json") && fs::is_directory(fs::path(path) / "vae"))
      weights = (fs::path(path) / "vae").string();
    if (fs::exists(fs::path(weights) / "config.json")) config_json = (fs::path(weights) / "config.json").string();
  }
  const io::Checkpoint ckpt = io::Checkpoint::open(weights);
  TensorStore store = TensorStore::from_checkpoint(ckpt);
  // A full BFL/ComfyUI file may carry the VAE under a prefix.
  if (!store.contains("decoder.conv_in.weight")) {
    for (const char* prefix : {"vae.", "first_stage_model.", "ae."}) {
      TensorStore s = TensorStore::from_checkpoint(ckpt, prefix);
      if (s.contains("decoder.conv_in.weight")) {
        store = std::move(s);
        break;
      }
    }
  }
  FLUXRT_CHECK(store.contains("decoder.conv_in.weight"), ErrorCode::Format,
               "{}: no decoder.conv_in.weight, not a {} checkpoint", weights, what);
  return store;
}

// ---------------------------------------------------------------------------------------------
// Synthetic weights

float synthetic_uniform(uint64_t& state) {  // splitmix64 -> uniform [-1, 1)
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);
}

void add_synthetic_vae_tensors(TensorStore& store, const std::vector<std::pair<std::string, Shape>>& shapes,
                               DType dtype, uint64_t& state) {
  for (const auto& [name, shape] : shapes) {
    Tensor t = Tensor::empty(shape, DType::F32);
    float* p = t.data<float>();
    const int64_t n = t.numel();
    const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool is_norm = name.find("norm") != std::string::npos;
    if (is_norm && !is_bias) {
      for (int64_t i = 0; i < n; ++i) p[i] = 1.0f + 0.1f * synthetic_uniform(state);
    } else if (is_bias) {
      for (int64_t i = 0; i < n; ++i) p[i] = 0.02f * synthetic_uniform(state);
    } else {
      const int64_t fan_in = n / shape[0];
      const float s = 1.0f / std::sqrt(static_cast<float>(fan_in));
      for (int64_t i = 0; i < n; ++i) p[i] = s * synthetic_uniform(state);
    }
    store.add(name, t.to(dtype), "synthetic");
  }
}

// ---------------------------------------------------------------------------------------------
// Post-processing (VaeImageProcessor.postprocess + numpy_to_pil's rounding)

Tensor postprocess_to_uint8(const Tensor& image) {
  FLUXRT_CHECK(image.defined() && image.dim() == 4, ErrorCode::InvalidArgument,
               "postprocess_to_uint8: image must be [B, C, H, W], got {}",
               image.defined() ? image.shape().str() : "undefined");
  const int64_t B = image.size(0), C = image.size(1), H = image.size(2), W = image.size(3);
  const DType dt = image.dtype();
  const Tensor x = to_device(image, Device::cpu()).to(DType::F32).contiguous();  // [B, C, H, W], on the host
  Tensor out = Tensor::empty({B, H, W, C}, DType::U8);                        // [B, H, W, C]
  const float* src = x.data<float>();
  uint8_t* dst = out.data<uint8_t>();
  // Rounds an f32 to the image's dtype, as each torch op on a bf16/f16 tensor does.
  auto in_dtype = [dt](float v) {
    if (dt == DType::BF16) return bf16_to_f32(f32_to_bf16(v));
    if (dt == DType::F16) {
      Tensor t = Tensor::from_vector({v}, {1}, DType::F32).to(DType::F16).to(DType::F32);
      return t.data<float>()[0];
    }
    return v;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i) {
        float v = src[(b * C + c) * H * W + i];
        v = in_dtype(in_dtype(v * 0.5f) + 0.5f);        // images * 0.5 + 0.5 (two torch ops)
        v = std::min(std::max(v, 0.0f), 1.0f);          // .clamp(0, 1); NaN stays NaN
        const float s = v * 255.0f;                     // numpy f32 multiply
        const float r = std::nearbyint(s);              // np.round: half to even
        dst[((b * H) + i / W) * W * C + (i % W) * C + c] = static_cast<uint8_t>(std::isnan(r) ? 0 : r);
      }
  return out;
}

}  // namespace fluxrt::models
