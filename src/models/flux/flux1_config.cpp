#include "models/flux/flux1_config.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/weight_binder.h"

namespace fluxrt::models {

void Flux1Config::validate(const std::string& where) const {
  FLUXRT_CHECK(heads > 0 && head_dim > 0 && hidden == heads * head_dim, ErrorCode::InvalidArgument,
               "{}: FLUX.1 hidden size {} is not heads {} x head_dim {}", where, hidden, heads, head_dim);
  FLUXRT_CHECK(head_dim % 2 == 0, ErrorCode::InvalidArgument, "{}: head_dim {} must be even for RoPE", where,
               head_dim);
  const int64_t axes = std::accumulate(axes_dim.begin(), axes_dim.end(), int64_t{0});
  FLUXRT_CHECK(axes == head_dim, ErrorCode::InvalidArgument, "{}: RoPE axes sum to {}, head_dim is {}", where, axes,
               head_dim);
  FLUXRT_CHECK(double_blocks >= 0 && single_blocks >= 0 && in_channels > 0 && out_channels > 0 &&
                   context_dim > 0 && pooled_dim > 0 && mlp_hidden > 0 && timestep_channels > 0 &&
                   timestep_channels % 2 == 0,
               ErrorCode::InvalidArgument, "{}: FLUX.1 config has a non-positive size", where);
}

int64_t Flux1Config::parameter_count() const {
  const int64_t d = hidden, m = mlp_hidden, tc = timestep_channels;
  auto linear = [](int64_t in, int64_t out) { return in * out + out; };
  const int64_t mlp_embedder_t = linear(tc, d) + linear(d, d);
  const int64_t embed = linear(in_channels, d) + linear(context_dim, d) + mlp_embedder_t +
                        (guidance ? mlp_embedder_t : 0) + linear(pooled_dim, d) + linear(d, d);
  const int64_t stream = linear(d, 6 * d) + linear(d, 3 * d) + 2 * head_dim + linear(d, d) + linear(d, m) + linear(m, d);
  const int64_t sgl = linear(d, 3 * d) + linear(d, 3 * d + m) + linear(d + m, d) + 2 * head_dim;
  const int64_t final_layer = linear(d, 2 * d) + linear(d, out_channels);
  return embed + double_blocks * 2 * stream + single_blocks * sgl + final_layer;
}

double Flux1Config::flops_per_forward(int64_t image_tokens, int64_t text_tokens) const {
  const double d = static_cast<double>(hidden), m = static_cast<double>(mlp_hidden);
  const double li = static_cast<double>(image_tokens), lt = static_cast<double>(text_tokens), l = li + lt;
  // Linear MACs per token and block: qkv 3D^2, proj D^2, MLP 2MD (double blocks act on both
  // streams = L tokens); single: q/k/v/mlp (3D + M) D, linear2 (D + M) D.
  const double dbl = 2.0 * l * (4.0 * d * d + 2.0 * m * d) + 4.0 * l * l * d;
  const double sgl = 2.0 * l * ((3.0 * d + m) * d + (d + m) * d) + 4.0 * l * l * d;
  const double io = 2.0 * li * in_channels * d + 2.0 * lt * context_dim * d + 2.0 * li * out_channels * d;
  // Embedders, per-block modulations and the final modulation: M = 1 GEMVs.
  const double tc = static_cast<double>(timestep_channels);
  const double vec = 2.0 * ((guidance ? 2.0 : 1.0) * (tc * d + d * d) + pooled_dim * d + d * d +
                            double_blocks * 12.0 * d * d + single_blocks * 3.0 * d * d + 2.0 * d * d);
  return double_blocks * dbl + single_blocks * sgl + io + vec;
}

Flux1Config flux1_preset(const std::string& name) {
  Flux1Config c;
  const std::string suffix = kFlux1SharedBlocksSuffix;
  std::string variant = name;
  if (variant.size() > suffix.size() && variant.compare(variant.size() - suffix.size(), suffix.size(), suffix) == 0) {
    variant.resize(variant.size() - suffix.size());
    c.shared_block_weights = true;
  }
  if (variant == "flux.1-dev") {
    c.guidance = true;
  } else if (variant == "flux.1-schnell") {
    c.guidance = false;
  } else {
    fail(ErrorCode::InvalidArgument,
         "unknown FLUX.1 variant '{}' (known: flux.1-dev, flux.1-schnell, each also with {} for synthetic weights)",
         name, suffix);
  }
  c.variant = variant;
  return c;
}

namespace {

std::string name_variant(const Flux1Config& c) {
  const Flux1Config p = flux1_preset(c.guidance ? "flux.1-dev" : "flux.1-schnell");
  const bool same = p.hidden == c.hidden && p.heads == c.heads && p.double_blocks == c.double_blocks &&
                    p.single_blocks == c.single_blocks && p.context_dim == c.context_dim &&
                    p.pooled_dim == c.pooled_dim && p.mlp_hidden == c.mlp_hidden && p.in_channels == c.in_channels &&
                    p.out_channels == c.out_channels && p.axes_dim == c.axes_dim;
  return same ? p.variant : "custom";
}

}  // namespace

Flux1Config flux1_config_from_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorCode::NotFound, "{}: cannot open the FLUX.1 transformer config", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail(ErrorCode::Format, "{}: invalid JSON ({})", path, e.what());
  }
  Flux1Config c;
  try {
    if (j.contains("_class_name") && j["_class_name"] != "FluxTransformer2DModel")
      fail(ErrorCode::Format, "{}: _class_name is {}, expected FluxTransformer2DModel", path, j["_class_name"].dump());
    auto get = [&](const char* key, int64_t fallback) {
      return j.contains(key) && !j[key].is_null() ? j[key].get<int64_t>() : fallback;
    };
    // Fallbacks are FluxTransformer2DModel's __init__ defaults (the FLUX.1 shapes).
    c.head_dim = get("attention_head_dim", 128);
    c.heads = get("num_attention_heads", 24);
    c.hidden = c.heads * c.head_dim;
    c.double_blocks = get("num_layers", 19);
    c.single_blocks = get("num_single_layers", 38);
    c.in_channels = get("in_channels", 64);
    c.out_channels = get("out_channels", c.in_channels);
    c.context_dim = get("joint_attention_dim", 4096);
    c.pooled_dim = get("pooled_projection_dim", 768);
    c.mlp_hidden = 4 * c.hidden;  // diffusers fixes mlp_ratio = 4 for FLUX.1 blocks
    c.guidance = j.value("guidance_embeds", false);
    if (j.contains("axes_dims_rope")) c.axes_dim = j["axes_dims_rope"].get<std::vector<int64_t>>();
    if (get("patch_size", 1) != 1) fail(ErrorCode::Unsupported, "{}: patch_size != 1 is not supported", path);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::Format, "{}: bad FLUX.1 config field ({})", path, e.what());
  }
  c.validate(path);
  c.variant = name_variant(c);
  return c;
}

Flux1Config flux1_config_detect(const TensorStore& s) {
  const std::string& where = s.description();
  // Shapes only: a quantized (GGUF) store is not dequantized to read them.
  auto need = [&](const std::string& name) { return detect_2d_shape(s, name, "FLUX.1 config"); };
  Flux1Config c;
  const Shape img_in = need("img_in.weight");
  c.hidden = img_in[0];
  c.in_channels = img_in[1];
  c.context_dim = need("txt_in.weight")[1];
  c.pooled_dim = need("vector_in.in_layer.weight")[1];
  c.timestep_channels = need("time_in.in_layer.weight")[1];
  c.out_channels = need("final_layer.linear.weight")[0];
  c.guidance = s.contains("guidance_in.in_layer.weight");
  const char* norm_names[] = {"single_blocks.0.norm.query_norm.scale", "double_blocks.0.img_attn.norm.query_norm.scale"};
  c.head_dim = 0;
  for (const char* n : norm_names)
    if (s.contains(n)) c.head_dim = s.shape(n).numel();
  FLUXRT_CHECK(c.head_dim > 0 && c.hidden % c.head_dim == 0, ErrorCode::Format,
               "{}: cannot detect the FLUX.1 head dim (hidden size {}, query norm of {} elements)", where, c.hidden,
               c.head_dim);
  c.heads = c.hidden / c.head_dim;
  FLUXRT_CHECK(c.head_dim == 128, ErrorCode::Unsupported,
               "{}: head_dim {} has no known RoPE axes; load it from a diffusers folder with config.json", where,
               c.head_dim);
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
    c.mlp_hidden = need("double_blocks.0.img_mlp.0.weight")[0];
  else if (ns > 0)
    c.mlp_hidden = need("single_blocks.0.mlp.weight")[0];
  else c.mlp_hidden = 4 * c.hidden;
  c.validate(where);
  c.variant = name_variant(c);
  return c;
}

}  // namespace fluxrt::models
