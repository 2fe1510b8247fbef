#include "models/flux/flux1_names.h"

#include <algorithm>
#include <array>
#include <regex>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/elementwise.h"

namespace fluxrt::models {
namespace {

constexpr const char* kComfyPrefix = "model.diffusion_model.";

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

bool has_comfy_prefix(const TensorStore& raw) {
  const auto names = raw.names();
  return !names.empty() && std::all_of(names.begin(), names.end(), [](const std::string& n) {
    // The scaled-fp8 marker sometimes sits outside the prefix.
    return starts_with(n, kComfyPrefix) || n == "scaled_fp8";
  });
}

std::string strip(const std::string& name, bool prefixed) {
  return prefixed && starts_with(name, kComfyPrefix) ? name.substr(std::string(kComfyPrefix).size()) : name;
}

// diffusers FluxTransformer2DModel name -> canonical name for the 1:1 renames (suffix kept).
std::string diffusers_rename(const std::string& n) {
  static const std::vector<std::pair<std::regex, std::string>> rules = [] {
    std::vector<std::pair<std::regex, std::string>> r;
    // `from` names the layer; its weight/bias suffix is the capture group after from's own groups.
    auto add = [&](const std::string& from, const std::string& to) {
      const auto suffix_group = std::count(from.begin(), from.end(), '(') + 1;
      r.emplace_back(std::regex("^" + from + R"(\.(weight|bias)$)"), to + ".$" + std::to_string(suffix_group));
    };
    add(R"(x_embedder)", "img_in");
    add(R"(context_embedder)", "txt_in");
    add(R"(time_text_embed\.timestep_embedder\.linear_1)", "time_in.in_layer");
    add(R"(time_text_embed\.timestep_embedder\.linear_2)", "time_in.out_layer");
    add(R"(time_text_embed\.guidance_embedder\.linear_1)", "guidance_in.in_layer");
    add(R"(time_text_embed\.guidance_embedder\.linear_2)", "guidance_in.out_layer");
    add(R"(time_text_embed\.text_embedder\.linear_1)", "vector_in.in_layer");
    add(R"(time_text_embed\.text_embedder\.linear_2)", "vector_in.out_layer");
    add(R"(transformer_blocks\.(\d+)\.norm1\.linear)", "double_blocks.$1.img_mod.lin");
    add(R"(transformer_blocks\.(\d+)\.norm1_context\.linear)", "double_blocks.$1.txt_mod.lin");
    add(R"(transformer_blocks\.(\d+)\.attn\.to_([qkv]))", "double_blocks.$1.img_attn.$2");
    add(R"(transformer_blocks\.(\d+)\.attn\.add_([qkv])_proj)", "double_blocks.$1.txt_attn.$2");
    add(R"(transformer_blocks\.(\d+)\.attn\.to_out\.0)", "double_blocks.$1.img_attn.proj");
    add(R"(transformer_blocks\.(\d+)\.attn\.to_add_out)", "double_blocks.$1.txt_attn.proj");
    add(R"(transformer_blocks\.(\d+)\.ff\.net\.0\.proj)", "double_blocks.$1.img_mlp.0");
    add(R"(transformer_blocks\.(\d+)\.ff\.net\.2)", "double_blocks.$1.img_mlp.2");
    add(R"(transformer_blocks\.(\d+)\.ff_context\.net\.0\.proj)", "double_blocks.$1.txt_mlp.0");
    add(R"(transformer_blocks\.(\d+)\.ff_context\.net\.2)", "double_blocks.$1.txt_mlp.2");
    add(R"(single_transformer_blocks\.(\d+)\.norm\.linear)", "single_blocks.$1.modulation.lin");
    add(R"(single_transformer_blocks\.(\d+)\.attn\.to_([qkv]))", "single_blocks.$1.$2");
    add(R"(single_transformer_blocks\.(\d+)\.proj_mlp)", "single_blocks.$1.mlp");
    add(R"(single_transformer_blocks\.(\d+)\.proj_out)", "single_blocks.$1.linear2");
    add(R"(proj_out)", "final_layer.linear");
    // QK norm scales: diffusers `weight`, BFL `scale`.
    auto norm = [&](const char* from, const char* to) { r.emplace_back(std::regex(from), to); };
    norm(R"(^transformer_blocks\.(\d+)\.attn\.norm_q\.weight$)", "double_blocks.$1.img_attn.norm.query_norm.scale");
    norm(R"(^transformer_blocks\.(\d+)\.attn\.norm_k\.weight$)", "double_blocks.$1.img_attn.norm.key_norm.scale");
    norm(R"(^transformer_blocks\.(\d+)\.attn\.norm_added_q\.weight$)",
         "double_blocks.$1.txt_attn.norm.query_norm.scale");
    norm(R"(^transformer_blocks\.(\d+)\.attn\.norm_added_k\.weight$)",
         "double_blocks.$1.txt_attn.norm.key_norm.scale");
    norm(R"(^single_transformer_blocks\.(\d+)\.attn\.norm_q\.weight$)", "single_blocks.$1.norm.query_norm.scale");
    norm(R"(^single_transformer_blocks\.(\d+)\.attn\.norm_k\.weight$)", "single_blocks.$1.norm.key_norm.scale");
    return r;
  }();
  for (const auto& [re, to] : rules)
    if (std::regex_match(n, re)) return std::regex_replace(n, re, to);
  return n;  // unknown: kept, reported as unused by the binder
}

// Rows of one single block's fused linear1: D from its linear2 ([D, D + M]), M from the rest.
bool single_block_widths(const TensorStore& raw, bool prefixed, const std::string& block, int64_t rows,
                         int64_t* d, int64_t* m) {
  const std::string l2 = (prefixed ? std::string(kComfyPrefix) : "") + block + "linear2.weight";
  if (!raw.contains(l2) || raw.shape(l2).size() != 2) return false;
  *d = raw.shape(l2)[0];
  *m = rows - 3 * *d;
  return *m > 0;
}

}  // namespace

std::string flux1_canonical_name_of_diffusers(const std::string& diffusers_name) {
  return diffusers_rename(diffusers_name);
}

const char* flux1_layout_name(Flux1Layout layout) {
  switch (layout) {
    case Flux1Layout::Diffusers: return "diffusers";
    case Flux1Layout::Bfl: return "BFL single-file";
    case Flux1Layout::Canonical: return "canonical";
  }
  return "?";
}

Flux1Layout flux1_detect_layout(const TensorStore& raw) {
  const bool p = has_comfy_prefix(raw);
  auto has = [&](const std::string& n) { return raw.contains(p ? kComfyPrefix + n : n); };
  if (has("double_stream_modulation_img.lin.weight") || has("time_guidance_embed.timestep_embedder.linear_1.weight") ||
      has("double_stream_modulation_img.linear.weight"))
    fail(ErrorCode::Format, "{}: this is a FLUX.2 transformer checkpoint (shared modulation), not FLUX.1",
         raw.description());
  if (has("x_embedder.weight") || has("time_text_embed.timestep_embedder.linear_1.weight"))
    return Flux1Layout::Diffusers;
  if (has("final_layer.shift.weight")) return Flux1Layout::Canonical;
  if (has("img_in.weight") || has("final_layer.adaLN_modulation.1.weight") ||
      has("double_blocks.0.img_attn.qkv.weight"))
    return Flux1Layout::Bfl;
  fail(ErrorCode::Format,
       "{}: not a FLUX.1 transformer checkpoint (neither diffusers 'x_embedder.weight' nor BFL 'img_in.weight' "
       "found)",
       raw.description());
}

TensorStore flux1_to_canonical(const TensorStore& raw) {
  const Flux1Layout layout = flux1_detect_layout(raw);
  const bool prefixed = has_comfy_prefix(raw);
  TensorStore out;
  out.set_description(raw.description());
  static const std::regex fused_qkv(R"(^double_blocks\.(\d+)\.(img|txt)_attn\.qkv\.(weight|bias)$)");
  static const std::regex linear1(R"(^single_blocks\.(\d+)\.linear1\.(weight|bias)$)");
  // Entries are moved by add_entry / add_row_split (zero-copy row views), so quantized (GGUF)
  // weights stay quantized; only shapes are read.
  for (const auto& stored : raw.names()) {
    const std::string name = strip(stored, prefixed);
    const Shape shape = raw.shape(stored);
    const int64_t rows = shape.size() >= 1 ? shape[0] : 0;
    if (layout == Flux1Layout::Diffusers) {
      if (name == "norm_out.linear.weight" || name == "norm_out.linear.bias") {
        // diffusers AdaLayerNormContinuous: rows (scale, shift).
        const std::string sfx = name.substr(name.rfind('.'));
        if (out.add_row_split({"final_layer.scale" + sfx, "final_layer.shift" + sfx}, raw, stored)) continue;
      }
      out.add_entry(diffusers_rename(name), raw, stored);
      continue;
    }
    if (layout == Flux1Layout::Bfl) {
      std::smatch m;
      if (std::regex_match(name, m, fused_qkv)) {
        const std::string p = "double_blocks." + m[1].str() + "." + m[2].str() + "_attn.", sfx = "." + m[3].str();
        if (out.add_row_split({p + "q" + sfx, p + "k" + sfx, p + "v" + sfx}, raw, stored)) continue;
      } else if (std::regex_match(name, m, linear1)) {
        const std::string p = "single_blocks." + m[1].str() + ".", sfx = "." + m[2].str();
        int64_t d = 0, mlp = 0;
        if (rows > 0 && single_block_widths(raw, prefixed, p, rows, &d, &mlp) &&
            out.add_row_split({p + "q" + sfx, p + "k" + sfx, p + "v" + sfx, p + "mlp" + sfx}, raw, stored,
                              {d, d, d, mlp}))
          continue;
      } else if (name == "final_layer.adaLN_modulation.1.weight" || name == "final_layer.adaLN_modulation.1.bias") {
        // BFL LastLayer: rows (shift, scale).
        const std::string sfx = name.substr(name.rfind('.'));
        if (out.add_row_split({"final_layer.shift" + sfx, "final_layer.scale" + sfx}, raw, stored)) continue;
      }
    }
    out.add_entry(name, raw, stored);
  }
  return out;
}

TensorStore flux1_canonical_to_bfl(const TensorStore& c) {
  TensorStore out;
  out.set_description(c.description());
  static const std::regex split_q(R"(^double_blocks\.(\d+)\.(img|txt)_attn\.q\.(weight|bias)$)");
  static const std::regex split_kv(R"(^double_blocks\.(\d+)\.(img|txt)_attn\.[kv]\.(weight|bias)$)");
  static const std::regex single_q(R"(^single_blocks\.(\d+)\.q\.(weight|bias)$)");
  static const std::regex single_rest(R"(^single_blocks\.(\d+)\.(k|v|mlp)\.(weight|bias)$)");
  for (const auto& name : c.names()) {
    std::smatch m;
    if (std::regex_match(name, m, split_q)) {
      const std::string p = "double_blocks." + m[1].str() + "." + m[2].str() + "_attn.", sfx = "." + m[3].str();
      out.add(p + "qkv" + sfx, ops::concat({c.get(p + "q" + sfx), c.get(p + "k" + sfx), c.get(p + "v" + sfx)}, 0));
      continue;
    }
    if (std::regex_match(name, m, single_q)) {
      const std::string p = "single_blocks." + m[1].str() + ".", sfx = "." + m[2].str();
      out.add(p + "linear1" + sfx, ops::concat({c.get(p + "q" + sfx), c.get(p + "k" + sfx), c.get(p + "v" + sfx),
                                                c.get(p + "mlp" + sfx)},
                                               0));
      continue;
    }
    if (std::regex_match(name, split_kv) || std::regex_match(name, single_rest)) continue;
    if (starts_with(name, "final_layer.shift.")) {
      const std::string sfx = name.substr(name.rfind('.'));
      out.add("final_layer.adaLN_modulation.1" + sfx,
              ops::concat({c.get("final_layer.shift" + sfx), c.get("final_layer.scale" + sfx)}, 0));
      continue;
    }
    if (starts_with(name, "final_layer.scale.")) continue;
    out.add(name, c.get(name), c.origin(name));
  }
  return out;
}

}  // namespace fluxrt::models
