// LoRA module names (lora_file.h: normalised, dotted) -> the FLUX transformers' canonical weights,
// and the layers that tell a FLUX.1 LoRA from a FLUX.2 one.
#include "models/flux/flux_lora_names.h"

#include <regex>

#include "models/flux/flux1_names.h"
#include "models/flux/flux2_names.h"

namespace fluxrt::models {
namespace {

// FLUX.1-only layers: per-block modulation, GELU MLP, split single blocks, the pooled and guidance
// embedders. Text-encoder modules are FLUX.1's too: FLUX.2's text encoder is Qwen3, whose LoRA
// parts no file here carries, so CLIP and T5 parts (lora_file.h) are FLUX.1's.
bool flux1_only(const std::string& m) {
  static const std::regex re(
      R"(.*(_mod\.lin|\.modulation\.lin|^vector_in|^guidance_in|norm1\.linear|norm1_context\.linear|\.net\.0\.proj|\.net\.2|proj_mlp|^single_transformer_blocks\.\d+\.(attn\.to_[qkv]|norm\.linear|proj_out)$|^time_text_embed|^single_blocks\.\d+\.qkv).*)");
  return m.rfind(kClipTextModulePrefix, 0) == 0 || m.rfind(kT5TextModulePrefix, 0) == 0 ||
         std::regex_match(m, re);
}

// FLUX.2-only layers: shared modulation, SwiGLU, fused single-block names.
bool flux2_only(const std::string& m) {
  static const std::regex re(
      R"(.*(double_stream_modulation|single_stream_modulation|to_qkv_mlp_proj|linear_in|linear_out|^single_transformer_blocks\.\d+\.attn\.to_out|^time_guidance_embed).*)");
  return std::regex_match(m, re);
}

// The targets both architectures give a module the same way; empty when it is not such a module.
std::vector<std::string> shared_targets(const std::string& m) {
  static const std::regex qkv(R"(^double_blocks\.(\d+)\.(img|txt)_attn\.qkv$)");
  std::smatch g;
  if (std::regex_match(m, g, qkv)) {
    const std::string p = "double_blocks." + g[1].str() + "." + g[2].str() + "_attn.";
    return {p + "q.weight", p + "k.weight", p + "v.weight"};
  }
  // BFL LastLayer rows are (shift, scale); diffusers' AdaLayerNormContinuous rows (scale, shift).
  // Each half goes to the layer it was trained as, whichever file layout it came in.
  if (m == "final_layer.adaLN_modulation.1") return {"final_layer.shift.weight", "final_layer.scale.weight"};
  if (m == "norm_out.linear") return {"final_layer.scale.weight", "final_layer.shift.weight"};
  return {};
}

std::vector<std::string> flux1_targets(const std::string& m) {
  if (std::vector<std::string> t = shared_targets(m); !t.empty()) return t;
  static const std::regex linear1(R"(^single_blocks\.(\d+)\.linear1$)");
  static const std::regex xlabs_single_qkv(R"(^single_blocks\.(\d+)\.qkv$)");
  std::smatch g;
  // FLUX.1 binds linear1's rows as four layers (FLUX.2 keeps it fused: one GEMM, one target).
  if (std::regex_match(m, g, linear1)) {
    const std::string p = "single_blocks." + g[1].str() + ".";
    return {p + "q.weight", p + "k.weight", p + "v.weight", p + "mlp.weight"};
  }
  if (std::regex_match(m, g, xlabs_single_qkv)) {
    const std::string p = "single_blocks." + g[1].str() + ".";
    return {p + "q.weight", p + "k.weight", p + "v.weight"};
  }
  return {flux1_canonical_name_of_diffusers(m + ".weight")};
}

std::vector<std::string> flux2_targets(const std::string& m) {
  if (std::vector<std::string> t = shared_targets(m); !t.empty()) return t;
  return {flux2_canonical_name_of_diffusers(m + ".weight")};
}

std::vector<const LoraNameScheme*> flux1_rivals() { return {&flux2_lora_scheme()}; }
std::vector<const LoraNameScheme*> flux2_rivals() { return {&flux1_lora_scheme()}; }

}  // namespace

const LoraNameScheme& flux1_lora_scheme() {
  static const LoraNameScheme scheme{"FLUX.1", &flux1_only, &flux1_targets, &flux1_rivals};
  return scheme;
}

const LoraNameScheme& flux2_lora_scheme() {
  static const LoraNameScheme scheme{"FLUX.2", &flux2_only, &flux2_targets, &flux2_rivals};
  return scheme;
}

}  // namespace fluxrt::models
