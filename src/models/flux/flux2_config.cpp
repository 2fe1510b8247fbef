#include "models/flux/flux2_config.h"

#include <fstream>
#include <numeric>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/weight_binder.h"

namespace fluxrt::models {

void Flux2Config::validate(const std::string& where) const {
  FLUXRT_CHECK(hidden > 0 && heads > 0 && head_dim > 0 && hidden == heads * head_dim, ErrorCode::InvalidArgument,
               "{}: FLUX.2 hidden size {} is not heads {} x head_dim {}", where, hidden, heads, head_dim);
  FLUXRT_CHECK(head_dim % 2 == 0, ErrorCode::InvalidArgument, "{}: head_dim {} must be even for RoPE", where,
               head_dim);
  const int64_t axes = std::accumulate(axes_dim.begin(), axes_dim.end(), int64_t{0});
  FLUXRT_CHECK(axes == head_dim, ErrorCode::InvalidArgument, "{}: RoPE axes sum to {}, head_dim is {}", where, axes,
               head_dim);
  FLUXRT_CHECK(double_blocks >= 0 && single_blocks >= 0 && in_channels > 0 && out_channels > 0 &&
                   context_dim > 0 && mlp_hidden > 0 && timestep_channels > 0 && timestep_channels % 2 == 0,
               ErrorCode::InvalidArgument, "{}: FLUX.2 config has a non-positive size", where);
}

int64_t Flux2Config::parameter_count() const {
  const int64_t d = hidden, m = mlp_hidden;
  const int64_t embed = d * in_channels + d * context_dim + d * timestep_channels + d * d;
  const int64_t modulation = 6 * d * d * 2 + 3 * d * d;
  const int64_t dbl = 2 * (3 * d * d + d * d + 2 * m * d + m * d + 2 * head_dim);
  const int64_t sgl = (3 * d + 2 * m) * d + (d + m) * d + 2 * head_dim;
  const int64_t final_layer = 2 * d * d + out_channels * d;
  return embed + modulation + double_blocks * dbl + single_blocks * sgl + final_layer;
}

double Flux2Config::flops_per_forward(int64_t image_tokens, int64_t text_tokens) const {
  const double d = static_cast<double>(hidden), m = static_cast<double>(mlp_hidden);
  const double li = static_cast<double>(image_tokens), lt = static_cast<double>(text_tokens), l = li + lt;
  // Linear MACs per token and block: qkv 3D^2, proj D^2, SwiGLU in 2MD, out MD (double blocks act
  // on both streams = L tokens); single: linear1 (3D + 2M) D, linear2 (D + M) D.
  const double dbl = 2.0 * l * (4.0 * d * d + 3.0 * m * d) + 4.0 * l * l * d;
  const double sgl = 2.0 * l * ((3.0 * d + 2.0 * m) * d + (d + m) * d) + 4.0 * l * l * d;
  const double io = 2.0 * li * in_channels * d + 2.0 * lt * context_dim * d + 2.0 * li * out_channels * d;
  // Timestep embedder, shared modulations, final modulation: M = 1 GEMVs.
  const double vec = 2.0 * (timestep_channels * d + d * d + 15.0 * d * d + 2.0 * d * d);
  return double_blocks * dbl + single_blocks * sgl + io + vec;
}

double Flux2Config::flops_per_forward_with_reference_kv(int64_t image_tokens, int64_t text_tokens,
                                                        int64_t reference_tokens) const {
  const double queries = static_cast<double>(image_tokens + text_tokens);
  // Scores and their weighted sum against the extra keys: 2 x 2 x L x Lr x D MACs per block.
  const double extra = 4.0 * queries * static_cast<double>(reference_tokens) * static_cast<double>(hidden);
  return flops_per_forward(image_tokens, text_tokens) + (double_blocks + single_blocks) * extra;
}

Flux2Config flux2_preset(const std::string& variant) {
  Flux2Config c;
  if (variant == "flux.2-klein-4b" || variant == "flux.2-klein-base-4b") {
    c.hidden = 3072, c.heads = 24, c.double_blocks = 5, c.single_blocks = 20, c.context_dim = 7680;
    c.mlp_hidden = 9216;
  } else if (variant == "flux.2-klein-9b" || variant == "flux.2-klein-base-9b") {
    c.hidden = 4096, c.heads = 32, c.double_blocks = 8, c.single_blocks = 24, c.context_dim = 12288;
    c.mlp_hidden = 12288;
  } else {
    fail(ErrorCode::InvalidArgument,
         "unknown FLUX.2 variant '{}' (known: flux.2-klein-4b, flux.2-klein-9b, flux.2-klein-base-4b, "
         "flux.2-klein-base-9b)",
         variant);
  }
  c.variant = variant;
  return c;
}

namespace {

std::string name_variant(const Flux2Config& c) {
  for (const char* v : {"flux.2-klein-4b", "flux.2-klein-9b"}) {
    const Flux2Config p = flux2_preset(v);
    if (p.hidden == c.hidden && p.double_blocks == c.double_blocks && p.single_blocks == c.single_blocks &&
        p.context_dim == c.context_dim && p.mlp_hidden == c.mlp_hidden && p.in_channels == c.in_channels)
      return v;
  }
  return "custom";
}

}  // namespace

Flux2Config flux2_config_from_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorCode::NotFound, "{}: cannot open the FLUX.2 transformer config", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail(ErrorCode::Format, "{}: invalid JSON ({})", path, e.what());
  }
  Flux2Config c;
  try {
    if (j.contains("_class_name") && j["_class_name"] != "Flux2Transformer2DModel")
      fail(ErrorCode::Format, "{}: _class_name is {}, expected Flux2Transformer2DModel", path,
           j["_class_name"].dump());
    auto get = [&](const char* key, int64_t fallback) {
      return j.contains(key) && !j[key].is_null() ? j[key].get<int64_t>() : fallback;
    };
    c.head_dim = get("attention_head_dim", 128);
    c.heads = get("num_attention_heads", 24);
    c.hidden = c.heads * c.head_dim;
    c.double_blocks = get("num_layers", 8);
    c.single_blocks = get("num_single_layers", 48);
    c.in_channels = get("in_channels", 128);
    c.out_channels = get("out_channels", c.in_channels);
    c.context_dim = get("joint_attention_dim", 15360);
    c.timestep_channels = get("timestep_guidance_channels", 256);
    const double ratio = j.value("mlp_ratio", 3.0);
    c.mlp_hidden = static_cast<int64_t>(static_cast<double>(c.hidden) * ratio);  // int(dim * mlp_ratio)
    if (j.contains("axes_dims_rope")) c.axes_dim = j["axes_dims_rope"].get<std::vector<int64_t>>();
    c.rope_theta = j.value("rope_theta", 2000.0);
    c.eps = j.value("eps", 1e-6f);
    if (j.value("guidance_embeds", false))
      fail(ErrorCode::Unsupported, "{}: guidance_embeds = true (FLUX.2-dev) is not supported", path);
    if (get("patch_size", 1) != 1) fail(ErrorCode::Unsupported, "{}: patch_size != 1 is not supported", path);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::Format, "{}: bad FLUX.2 config field ({})", path, e.what());
  }
  c.validate(path);
  c.variant = name_variant(c);
  return c;
}

Flux2Config flux2_config_detect(const TensorStore& s) {
  const std::string& where = s.description();
  // Shapes only: a quantized (GGUF) store is not dequantized to read them.
  auto need = [&](const std::string& name) { return detect_2d_shape(s, name, "FLUX.2 config"); };
  Flux2Config c;
  const Shape img_in = need("img_in.weight");
  c.hidden = img_in[0];
  c.in_channels = img_in[1];
  c.context_dim = need("txt_in.weight")[1];
  c.timestep_channels = need("time_in.in_layer.weight")[1];
  c.out_channels = need("final_layer.linear.weight")[0];
  const Shape q_norm = s.shape(s.contains("single_blocks.0.norm.query_norm.scale")
                                   ? "single_blocks.0.norm.query_norm.scale"
                                   : "double_blocks.0.img_attn.norm.query_norm.scale");
  c.head_dim = q_norm.numel() > 0 ? q_norm.numel() : 128;
  FLUXRT_CHECK(c.head_dim > 0 && c.hidden % c.head_dim == 0, ErrorCode::Format,
               "{}: hidden size {} is not a multiple of the head dim {}", where, c.hidden, c.head_dim);
  c.heads = c.hidden / c.head_dim;
  // FLUX.2's four RoPE axes (t, h, w, l) share the head dim equally, 32 each at 128; a custom head
  // dim keeps that split (when it halves into four even parts). A config.json, where there is one,
  // says otherwise.
  if (c.head_dim != 128 && c.head_dim % 8 == 0) c.axes_dim.assign(4, c.head_dim / 4);
  int64_t nd = 0, ns = 0;
  static const std::regex block(R"(^(double|single)_blocks\.(\d+)\.)");
  for (const auto& name : s.names()) {
    std::smatch m;
    if (!std::regex_search(name, m, block)) continue;
    const int64_t i = std::stoll(m[2].str()) + 1;
    if (m[1] == "double") nd = std::max(nd, i);
    else ns = std::max(ns, i);
  }
  c.double_blocks = nd;
  c.single_blocks = ns;
  if (nd > 0)
    c.mlp_hidden = need("double_blocks.0.img_mlp.0.weight")[0] / 2;
  else if (ns > 0)
    c.mlp_hidden = (need("single_blocks.0.linear1.weight")[0] - 3 * c.hidden) / 2;
  c.validate(where);
  c.variant = name_variant(c);
  return c;
}

}  // namespace fluxrt::models
