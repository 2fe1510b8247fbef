#include "models/flux/flux2_names.h"

#include <regex>

#include "core/error.h"
#include "ops/elementwise.h"

namespace fluxrt::models {
namespace {

constexpr const char* kComfyPrefix = "model.diffusion_model.";

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::string strip(const std::string& name, bool prefixed) {
  return prefixed && starts_with(name, kComfyPrefix) ? name.substr(std::string(kComfyPrefix).size()) : name;
}

bool has_comfy_prefix(const TensorStore& raw) {
  const auto names = raw.names();
  return !names.empty() && std::all_of(names.begin(), names.end(),
                                       [](const std::string& n) { return starts_with(n, kComfyPrefix); });
}

// Splits a [parts * R, K] tensor into `parts` zero-copy row views; false when rows don't divide.
// diffusers Flux2Transformer2DModel name -> canonical name for the 1:1 renames.
std::string diffusers_rename(const std::string& n) {
  static const std::vector<std::pair<std::regex, std::string>> rules = [] {
    std::vector<std::pair<std::regex, std::string>> r;
    auto add = [&](const char* from, const char* to) { r.emplace_back(std::regex(from), to); };
    add(R"(^x_embedder\.weight$)", "img_in.weight");
    add(R"(^context_embedder\.weight$)", "txt_in.weight");
    add(R"(^time_guidance_embed\.timestep_embedder\.linear_1\.weight$)", "time_in.in_layer.weight");
    add(R"(^time_guidance_embed\.timestep_embedder\.linear_2\.weight$)", "time_in.out_layer.weight");
    add(R"(^(double_stream_modulation_img|double_stream_modulation_txt|single_stream_modulation)\.linear\.weight$)",
        "$1.lin.weight");
    add(R"(^transformer_blocks\.(\d+)\.attn\.to_([qkv])\.weight$)", "double_blocks.$1.img_attn.$2.weight");
    add(R"(^transformer_blocks\.(\d+)\.attn\.add_([qkv])_proj\.weight$)", "double_blocks.$1.txt_attn.$2.weight");
    add(R"(^transformer_blocks\.(\d+)\.attn\.norm_q\.weight$)", "double_blocks.$1.img_attn.norm.query_norm.scale");
    add(R"(^transformer_blocks\.(\d+)\.attn\.norm_k\.weight$)", "double_blocks.$1.img_attn.norm.key_norm.scale");
    add(R"(^transformer_blocks\.(\d+)\.attn\.norm_added_q\.weight$)",
        "double_blocks.$1.txt_attn.norm.query_norm.scale");
    add(R"(^transformer_blocks\.(\d+)\.attn\.norm_added_k\.weight$)", "double_blocks.$1.txt_attn.norm.key_norm.scale");
    add(R"(^transformer_blocks\.(\d+)\.attn\.to_out\.0\.weight$)", "double_blocks.$1.img_attn.proj.weight");
    add(R"(^transformer_blocks\.(\d+)\.attn\.to_add_out\.weight$)", "double_blocks.$1.txt_attn.proj.weight");
    add(R"(^transformer_blocks\.(\d+)\.ff\.linear_in\.weight$)", "double_blocks.$1.img_mlp.0.weight");
    add(R"(^transformer_blocks\.(\d+)\.ff\.linear_out\.weight$)", "double_blocks.$1.img_mlp.2.weight");
    add(R"(^transformer_blocks\.(\d+)\.ff_context\.linear_in\.weight$)", "double_blocks.$1.txt_mlp.0.weight");
    add(R"(^transformer_blocks\.(\d+)\.ff_context\.linear_out\.weight$)", "double_blocks.$1.txt_mlp.2.weight");
    add(R"(^single_transformer_blocks\.(\d+)\.attn\.to_qkv_mlp_proj\.weight$)", "single_blocks.$1.linear1.weight");
    add(R"(^single_transformer_blocks\.(\d+)\.attn\.to_out\.weight$)", "single_blocks.$1.linear2.weight");
    add(R"(^single_transformer_blocks\.(\d+)\.attn\.norm_q\.weight$)", "single_blocks.$1.norm.query_norm.scale");
    add(R"(^single_transformer_blocks\.(\d+)\.attn\.norm_k\.weight$)", "single_blocks.$1.norm.key_norm.scale");
    add(R"(^proj_out\.weight$)", "final_layer.linear.weight");
    return r;
  }();
  for (const auto& [re, to] : rules)
    if (std::regex_match(n, re)) return std::regex_replace(n, re, to);
  return n;  // unknown: kept, reported as unused by the binder
}

}  // namespace

std::string flux2_canonical_name_of_diffusers(const std::string& diffusers_name) {
  return diffusers_rename(diffusers_name);
}

const char* flux2_layout_name(Flux2Layout layout) {
  switch (layout) {
    case Flux2Layout::Diffusers: return "diffusers";
    case Flux2Layout::Bfl: return "BFL single-file";
    case Flux2Layout::Canonical: return "canonical";
  }
  return "?";
}

Flux2Layout flux2_detect_layout(const TensorStore& raw) {
  const bool p = has_comfy_prefix(raw);
  auto has = [&](const std::string& n) { return raw.contains(p ? kComfyPrefix + n : n); };
  if (has("x_embedder.weight") || has("proj_out.weight")) return Flux2Layout::Diffusers;
  if (has("final_layer.adaLN_modulation.1.weight") || has("double_blocks.0.img_attn.qkv.weight"))
    return Flux2Layout::Bfl;
  if (has("final_layer.shift.weight")) return Flux2Layout::Canonical;
  fail(ErrorCode::Format,
       "{}: not a FLUX.2 transformer checkpoint (neither diffusers 'x_embedder.weight' nor BFL "
       "'final_layer.adaLN_modulation.1.weight' found)",
       raw.description());
}

TensorStore flux2_to_canonical(const TensorStore& raw) {
  const Flux2Layout layout = flux2_detect_layout(raw);
  const bool prefixed = has_comfy_prefix(raw);
  TensorStore out;
  out.set_description(raw.description());
  static const std::regex fused_qkv(R"(^double_blocks\.(\d+)\.(img|txt)_attn\.qkv\.weight$)");
  // Entries are moved by add_entry / add_row_split, so quantized (GGUF) weights stay quantized.
  for (const auto& stored : raw.names()) {
    const std::string name = strip(stored, prefixed);
    if (layout == Flux2Layout::Diffusers) {
      if (name == "norm_out.linear.weight") {
        // diffusers AdaLayerNormContinuous: rows (scale, shift).
        if (out.add_row_split({"final_layer.scale.weight", "final_layer.shift.weight"}, raw, stored))
          continue;
      }
      out.add_entry(diffusers_rename(name), raw, stored);
      continue;
    }
    if (layout == Flux2Layout::Bfl) {
      std::smatch m;
      if (std::regex_match(name, m, fused_qkv)) {
        const std::string p = "double_blocks." + m[1].str() + "." + m[2].str() + "_attn.";
        if (out.add_row_split({p + "q.weight", p + "k.weight", p + "v.weight"}, raw, stored)) continue;
      } else if (name == "final_layer.adaLN_modulation.1.weight") {
        // BFL LastLayer: rows (shift, scale).
        if (out.add_row_split({"final_layer.shift.weight", "final_layer.scale.weight"}, raw, stored))
          continue;
      }
    }
    out.add_entry(name, raw, stored);
  }
  return out;
}

TensorStore flux2_canonical_to_bfl(const TensorStore& c) {
  TensorStore out;
  out.set_description(c.description());
  static const std::regex split_q(R"(^double_blocks\.(\d+)\.(img|txt)_attn\.q\.weight$)");
  for (const auto& name : c.names()) {
    std::smatch m;
    if (std::regex_match(name, m, split_q)) {
      const std::string p = "double_blocks." + m[1].str() + "." + m[2].str() + "_attn.";
      out.add(p + "qkv.weight", ops::concat({c.get(p + "q.weight"), c.get(p + "k.weight"), c.get(p + "v.weight")}, 0));
      continue;
    }
    if (name.find("_attn.k.weight") != std::string::npos || name.find("_attn.v.weight") != std::string::npos) continue;
    if (name == "final_layer.shift.weight") {
      out.add("final_layer.adaLN_modulation.1.weight",
              ops::concat({c.get("final_layer.shift.weight"), c.get("final_layer.scale.weight")}, 0));
      continue;
    }
    if (name == "final_layer.scale.weight") continue;
    out.add(name, c.get(name), c.origin(name));
  }
  return out;
}

}  // namespace fluxrt::models
