#include "models/lora/lora_file.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "io/safetensors.h"

namespace fluxrt::models {
namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
bool contains(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

enum class Role {
  Down,
  Up,
  Alpha,
  Scale,
  W1,
  W1A,
  W1B,
  W2,
  W2A,
  W2B,
  HadaW1A,
  HadaW1B,
  HadaW2A,
  HadaW2B,
  Dora,
  Peft
};

// The tensor suffixes each scheme writes after the module name (LyCORIS's under every scheme).
struct Suffix {
  const char* text;
  Role role;
};
constexpr Suffix kSuffixes[] = {
    {".lora_A.weight", Role::Down},
    {".lora_B.weight", Role::Up},
    {".lora_down.weight", Role::Down},
    {".lora_up.weight", Role::Up},
    {".down.weight", Role::Down},
    {".up.weight", Role::Up},
    {".alpha", Role::Alpha},
    {".scale", Role::Scale},
    {".lokr_w1", Role::W1},
    {".lokr_w1_a", Role::W1A},
    {".lokr_w1_b", Role::W1B},
    {".lokr_w2", Role::W2},
    {".lokr_w2_a", Role::W2A},
    {".lokr_w2_b", Role::W2B},
    {".hada_w1_a", Role::HadaW1A},
    {".hada_w1_b", Role::HadaW1B},
    {".hada_w2_a", Role::HadaW2A},
    {".hada_w2_b", Role::HadaW2B},
    {".dora_scale", Role::Dora},
    // PEFT's state dict drops the magnitude layer's `.weight`; accept it kept too.
    {".lora_magnitude_vector", Role::Peft},
    {".lora_magnitude_vector.weight", Role::Peft},
};

// The kind a weight tensor's role says its module is; nullopt for alpha, scale and DoRA's magnitude,
// which any kind may carry.
std::optional<LoraKind> kind_of(Role role) {
  switch (role) {
    case Role::Down:
    case Role::Up:
      return LoraKind::Lora;
    case Role::W1:
    case Role::W1A:
    case Role::W1B:
    case Role::W2:
    case Role::W2A:
    case Role::W2B:
      return LoraKind::LoKr;
    case Role::HadaW1A:
    case Role::HadaW1B:
    case Role::HadaW2A:
    case Role::HadaW2B:
      return LoraKind::LoHa;
    case Role::Alpha:
    case Role::Scale:
    case Role::Dora:
    case Role::Peft:
      return std::nullopt;
  }
  return std::nullopt;
}

// Wrappers around the module name, stripped repeatedly (fal's base_model.model.diffusion_model.).
constexpr const char* kPrefixes[] = {"transformer.base_model.model.",
                                     "base_model.model.",
                                     "transformer.",
                                     "model.diffusion_model.",
                                     "diffusion_model.",
                                     "lora_unet_",
                                     "lora_transformer_",
                                     "lycoris_"};

std::string strip_prefixes(std::string s) {
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (const char* p : kPrefixes)
      if (starts_with(s, p)) {
        s = s.substr(std::string(p).size());
        stripped = true;
      }
  }
  return s;
}

// A module name with every dot turned into an underscore (kohya's form) -> the dotted name, for
// the projections FLUX.1 and FLUX.2 have, in BFL and in diffusers naming. Flattening first makes
// kohya, musubi's mixed form (double_blocks.0.img_attn_qkv) and the dotted forms one case.
std::optional<std::string> dotted_module(const std::string& stem) {
  static const std::vector<std::pair<std::regex, std::string>> table = [] {
    std::vector<std::pair<std::regex, std::string>> t;
    auto add = [&](const char* flat, const char* dotted) { t.emplace_back(std::regex(flat), dotted); };
    // BFL names.
    add(R"(double_blocks_(\d+)_(img|txt)_attn_(qkv|proj))", "double_blocks.$1.$2_attn.$3");
    add(R"(double_blocks_(\d+)_(img|txt)_mlp_(0|2))", "double_blocks.$1.$2_mlp.$3");
    add(R"(double_blocks_(\d+)_(img|txt)_mod_lin)", "double_blocks.$1.$2_mod.lin");
    add(R"(single_blocks_(\d+)_(linear1|linear2))", "single_blocks.$1.$2");
    add(R"(single_blocks_(\d+)_modulation_lin)", "single_blocks.$1.modulation.lin");
    add(R"((img_in|txt_in))", "$1");
    add(R"((time_in|vector_in|guidance_in)_(in_layer|out_layer))", "$1.$2");
    add(R"(final_layer_linear)", "final_layer.linear");
    add(R"(final_layer_adaLN_modulation_1)", "final_layer.adaLN_modulation.1");
    add(R"((double_stream_modulation_img|double_stream_modulation_txt|single_stream_modulation)_lin)",
        "$1.lin");
    // XLabs: stream 1 is the image, 2 the text; a single block's qkv_lora covers linear1's q, k, v
    // rows only (`single_blocks.N.qkv` here), its proj_lora is linear2.
    add(R"(double_blocks_(\d+)_processor_(qkv|proj)_lora1)", "double_blocks.$1.img_attn.$2");
    add(R"(double_blocks_(\d+)_processor_(qkv|proj)_lora2)", "double_blocks.$1.txt_attn.$2");
    add(R"(single_blocks_(\d+)_processor_qkv_lora)", "single_blocks.$1.qkv");
    add(R"(single_blocks_(\d+)_processor_proj_lora)", "single_blocks.$1.linear2");
    // diffusers names.
    add(R"(transformer_blocks_(\d+)_attn_(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj|to_add_out))",
        "transformer_blocks.$1.attn.$2");
    add(R"(transformer_blocks_(\d+)_attn_to_out_0)", "transformer_blocks.$1.attn.to_out.0");
    add(R"(transformer_blocks_(\d+)_(norm1|norm1_context)_linear)", "transformer_blocks.$1.$2.linear");
    add(R"(transformer_blocks_(\d+)_(ff|ff_context)_net_0_proj)", "transformer_blocks.$1.$2.net.0.proj");
    add(R"(transformer_blocks_(\d+)_(ff|ff_context)_net_2)", "transformer_blocks.$1.$2.net.2");
    add(R"(transformer_blocks_(\d+)_(ff|ff_context)_(linear_in|linear_out))", "transformer_blocks.$1.$2.$3");
    add(R"(single_transformer_blocks_(\d+)_attn_(to_q|to_k|to_v|to_qkv_mlp_proj|to_out))",
        "single_transformer_blocks.$1.attn.$2");
    add(R"(single_transformer_blocks_(\d+)_(proj_mlp|proj_out))", "single_transformer_blocks.$1.$2");
    add(R"(single_transformer_blocks_(\d+)_norm_linear)", "single_transformer_blocks.$1.norm.linear");
    add(R"((x_embedder|context_embedder|proj_out))", "$1");
    add(R"(norm_out_linear)", "norm_out.linear");
    add(R"((time_text_embed|time_guidance_embed)_(timestep_embedder|guidance_embedder|text_embedder)_linear_(1|2))",
        "$1.$2.linear_$3");
    add(R"((double_stream_modulation_img|double_stream_modulation_txt|single_stream_modulation)_linear)",
        "$1.linear");
    return t;
  }();
  std::string flat = stem;
  std::replace(flat.begin(), flat.end(), '.', '_');
  while (!flat.empty() && flat.back() == '_') flat.pop_back();  // old kohya diffusers names end in '_'
  for (const auto& [re, dotted] : table)
    if (std::regex_match(flat, re)) return std::regex_replace(flat, re, dotted);
  return std::nullopt;
}

bool is_diffusers_module(const std::string& m) {
  static const std::regex re(
      R"(^(transformer_blocks|single_transformer_blocks|x_embedder|context_embedder|proj_out|norm_out|time_text_embed|time_guidance_embed|double_stream_modulation_img\.linear|double_stream_modulation_txt\.linear|single_stream_modulation\.linear).*)");
  return std::regex_match(m, re);
}

// Which tool wrote a key, from its raw form and its normalised module name.
std::string format_of_key(const std::string& key, const std::string& stem, const std::string& module) {
  if (contains(key, ".processor.")) return "XLabs";
  if (starts_with(key, "lora_unet_"))
    return is_diffusers_module(module) ? "kohya (diffusers names)" : "kohya";
  if (starts_with(key, "lora_transformer_")) return "OneTrainer";
  if (starts_with(key, "base_model.model.") || starts_with(key, "transformer.base_model.model."))
    return "PEFT-wrapped (fal / SimpleTuner)";
  if (stem != module) return "musubi-tuner (underscore names)";
  return is_diffusers_module(module) ? "diffusers/PEFT" : "BFL/ComfyUI";
}

std::string text_encoder_format_of_key(const std::string& key) {
  if (starts_with(key, "lora_te")) return "kohya";
  if (starts_with(key, "text_encoders.")) return "ComfyUI";
  return "diffusers/PEFT";
}

float scalar_of(const Tensor& t, const std::string& what) {
  FLUXRT_CHECK(t.numel() == 1, ErrorCode::Format, "{}: expected one value, found shape {}", what,
               t.shape().str());
  const float v = static_cast<float>(t.to(DType::F32).contiguous().data<float>()[0]);
  FLUXRT_CHECK(std::isfinite(v), ErrorCode::Format, "{}: {} is not a number to scale by", what, v);
  return v;
}

bool is_matrix(const Tensor& t) { return t.defined() && t.dim() == 2 && t.numel() > 0; }

// Every tensor a module's kind needs is there, 2-D, float, and the products multiply; the delta's
// shape against the layer is lora_deltas' check. One line naming the file and the module.
void check_module(const LoraModule& m, const std::string& description) {
  const std::string where = description + ": LoRA module '" + m.key + "'";
  auto need = [&](const Tensor& t, const char* name) {
    FLUXRT_CHECK(t.defined(), ErrorCode::Format, "{} has no {} tensor", where, name);
    FLUXRT_CHECK(is_matrix(t), ErrorCode::Format, "{}: {} is {}, not a matrix", where, name, t.shape().str());
    FLUXRT_CHECK(dtype_is_float(t.dtype()), ErrorCode::Unsupported,
                 "{}: {} is stored as {}, not a float dtype", where, name, dtype_name(t.dtype()));
  };
  auto inner = [&](const Tensor& a, const Tensor& b, const char* an, const char* bn) {
    FLUXRT_CHECK(a.size(1) == b.size(0), ErrorCode::Format, "{}: {} {} and {} {} do not multiply", where, an,
                 a.shape().str(), bn, b.shape().str());
  };
  switch (m.kind) {
    case LoraKind::Lora:
      FLUXRT_CHECK(m.down.defined() && m.up.defined(), ErrorCode::Format, "{} has no {} matrix", where,
                   m.down.defined() ? "up (lora_B / lora_up)" : "down (lora_A / lora_down)");
      need(m.down, "down");
      need(m.up, "up");
      FLUXRT_CHECK(m.up.size(1) == m.down.size(0), ErrorCode::Format,
                   "{}: down {} and up {} are not [r, in] and [out, r]", where, m.down.shape().str(),
                   m.up.shape().str());
      break;
    case LoraKind::LoKr:
      // Each half is either whole or a low-rank pair, never both and never half a pair.
      FLUXRT_CHECK(m.w1.defined() != (m.w1_a.defined() || m.w1_b.defined()), ErrorCode::Format,
                   "{} needs lokr_w1 or lokr_w1_a + lokr_w1_b (exactly one of them)", where);
      FLUXRT_CHECK(m.w2.defined() != (m.w2_a.defined() || m.w2_b.defined()), ErrorCode::Format,
                   "{} needs lokr_w2 or lokr_w2_a + lokr_w2_b (exactly one of them)", where);
      if (m.w1.defined()) {
        need(m.w1, "lokr_w1");
      } else {
        need(m.w1_a, "lokr_w1_a");
        need(m.w1_b, "lokr_w1_b");
        inner(m.w1_a, m.w1_b, "lokr_w1_a", "lokr_w1_b");
      }
      if (m.w2.defined()) {
        need(m.w2, "lokr_w2");
      } else {
        need(m.w2_a, "lokr_w2_a");
        need(m.w2_b, "lokr_w2_b");
        inner(m.w2_a, m.w2_b, "lokr_w2_a", "lokr_w2_b");
      }
      break;
    case LoraKind::LoHa:
      need(m.w1_a, "hada_w1_a");
      need(m.w1_b, "hada_w1_b");
      need(m.w2_a, "hada_w2_a");
      need(m.w2_b, "hada_w2_b");
      inner(m.w1_a, m.w1_b, "hada_w1_a", "hada_w1_b");
      inner(m.w2_a, m.w2_b, "hada_w2_a", "hada_w2_b");
      FLUXRT_CHECK(m.w1_a.size(0) == m.w2_a.size(0) && m.w1_b.size(1) == m.w2_b.size(1), ErrorCode::Format,
                   "{}: hada_w1 ({} x {}) and hada_w2 ({} x {}) are not the same shape", where,
                   m.w1_a.size(0), m.w1_b.size(1), m.w2_a.size(0), m.w2_b.size(1));
      break;
  }
  if (m.dora()) {
    const Shape d = m.delta_shape();
    const Tensor& g = m.magnitude;
    const bool rows =
        (g.dim() == 1 && g.size(0) == d[0]) || (g.dim() == 2 && g.size(0) == d[0] && g.size(1) == 1);
    const bool cols = g.dim() == 2 && g.size(0) == 1 && g.size(1) == d[1];
    FLUXRT_CHECK(rows || cols, ErrorCode::Format,
                 "{}: the DoRA magnitude {} fits neither the delta's rows [{}] nor its columns [1, {}]",
                 where, g.shape().str(), d[0], d[1]);
    FLUXRT_CHECK(dtype_is_float(g.dtype()), ErrorCode::Unsupported, "{}: the DoRA magnitude is stored as {}",
                 where, dtype_name(g.dtype()));
  }
}

// diffusers' `lora_adapter_metadata`: the PEFT LoraConfig as JSON, keys optionally prefixed with
// the component ("transformer.r"). Returns lora_alpha and alpha_pattern.
struct PeftAlphas {
  std::optional<float> lora_alpha;
  std::vector<std::pair<std::string, float>> pattern;
};

// diffusers' save_lora_weights packs each component's PEFT config under its name
// ("transformer.lora_alpha", "text_encoder.lora_alpha"); a model's own save_lora_adapter writes
// bare keys (the transformer's).
struct PeftMetadata {
  PeftAlphas transformer, text_encoder, text_encoder_2;
};

PeftMetadata read_peft_metadata(const std::map<std::string, std::string>& metadata,
                                const std::string& description) {
  PeftMetadata out;
  const auto it = metadata.find("lora_adapter_metadata");
  if (it == metadata.end()) return out;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(it->second);
  } catch (const std::exception& e) {
    fail(ErrorCode::Format, "{}: lora_adapter_metadata is not valid JSON ({})", description, e.what());
  }
  if (!j.is_object()) return out;
  for (auto& [k, v] : j.items()) {
    const bool te = starts_with(k, "text_encoder."), te2 = starts_with(k, "text_encoder_2.");
    PeftAlphas& alphas = te ? out.text_encoder : te2 ? out.text_encoder_2 : out.transformer;
    const std::string key = te                               ? k.substr(13)
                            : te2                            ? k.substr(15)
                            : starts_with(k, "transformer.") ? k.substr(12)
                                                             : k;
    if (key == "lora_alpha" && v.is_number()) alphas.lora_alpha = v.get<float>();
    if (key == "alpha_pattern" && v.is_object())
      for (auto& [name, a] : v.items())
        if (a.is_number()) alphas.pattern.emplace_back(name, a.get<float>());
  }
  return out;
}

// The prefixes of text-encoder modules: kohya (lora_te1_ CLIP-L, lora_te3_ T5; lora_te_ in
// single-encoder files), OneTrainer (lora_te1_ / lora_te2_), diffusers / PEFT (text_encoder.,
// text_encoder_2.), ComfyUI. Which encoder a module is for is read from its name after the prefix.
constexpr const char* kTextEncoderPrefixes[] = {"lora_te1_",
                                                "lora_te2_",
                                                "lora_te3_",
                                                "lora_te_",
                                                "text_encoder_2.",
                                                "text_encoder.",
                                                "text_encoders.clip_l.transformer.",
                                                "text_encoders.t5xxl.transformer.",
                                                "te1.",
                                                "te2."};

// LyCORIS algorithms other than LoKr and LoHa: refused by name rather than as unmatched keys.
std::string refused_format(const std::string& key) {
  if (contains(key, ".oft_") || contains(key, ".boft_")) return "LyCORIS OFT / BOFT";
  if (ends_with(key, ".diff") || ends_with(key, ".diff_b")) return "LyCORIS full (diff)";
  if (ends_with(key, ".a1.weight") || ends_with(key, ".b1.weight")) return "LyCORIS GLoRA";
  return {};
}

// Tucker cores decompose a convolution's kernel dimensions; FLUX's adapted layers are all linear,
// so a file with one is for another model (or broken), not something to drop silently.
bool is_tucker_core(const std::string& key) {
  return ends_with(key, ".lokr_t2") || ends_with(key, ".hada_t1") || ends_with(key, ".hada_t2") ||
         ends_with(key, ".lora_mid.weight");
}

// A text-encoder key stem -> the module it adapts, named kClipTextModulePrefix + the
// CLIPTextModel module ("text_encoder.encoder.layers.0.self_attn.q_proj") or kT5TextModulePrefix +
// the T5EncoderModel module ("text_encoder_2.encoder.block.0.layer.0.SelfAttention.q"); nullopt
// when the stem is no text encoder's, "" when it names a part no LoRA here adapts.
std::optional<std::string> text_encoder_module(const std::string& stem) {
  std::string rest;
  for (const char* p : kTextEncoderPrefixes)
    if (starts_with(stem, p)) {
      rest = stem.substr(std::string(p).size());
      break;
    }
  if (rest.empty()) return std::nullopt;
  std::replace(rest.begin(), rest.end(), '.', '_');
  static const std::regex clip_attn(R"((?:text_model_)?encoder_layers_(\d+)_self_attn_(q|k|v|out)_proj)");
  static const std::regex clip_mlp(R"((?:text_model_)?encoder_layers_(\d+)_mlp_(fc1|fc2))");
  static const std::regex t5_attn(R"(encoder_block_(\d+)_layer_0_SelfAttention_(q|k|v|o))");
  static const std::regex t5_ff(R"(encoder_block_(\d+)_layer_1_DenseReluDense_(wi_0|wi_1|wo))");
  const std::string clip = kClipTextModulePrefix, t5 = kT5TextModulePrefix;
  std::smatch g;
  if (std::regex_match(rest, g, clip_attn))
    return clip + "encoder.layers." + g[1].str() + ".self_attn." + g[2].str() + "_proj";
  if (std::regex_match(rest, g, clip_mlp))
    return clip + "encoder.layers." + g[1].str() + ".mlp." + g[2].str();
  if (std::regex_match(rest, g, t5_attn))
    return t5 + "encoder.block." + g[1].str() + ".layer.0.SelfAttention." + g[2].str();
  if (std::regex_match(rest, g, t5_ff))
    return t5 + "encoder.block." + g[1].str() + ".layer.1.DenseReluDense." + g[2].str();
  return std::string();
}

}  // namespace

const char* lora_kind_name(LoraKind kind) {
  switch (kind) {
    case LoraKind::Lora:
      return "lora";
    case LoraKind::LoKr:
      return "lokr";
    case LoraKind::LoHa:
      return "loha";
  }
  return "?";
}

int64_t LoraModule::rank() const {
  switch (kind) {
    case LoraKind::Lora:
      return down.size(0);
    case LoraKind::LoKr:
      // ComfyUI's rule: w2's rank when it is decomposed, else w1's; LyCORIS gives both one rank.
      return w2_b.defined() ? w2_b.size(0) : w1_b.defined() ? w1_b.size(0) : 0;
    case LoraKind::LoHa:
      return w1_b.size(0);
  }
  return 0;
}

Shape LoraModule::delta_shape() const {
  switch (kind) {
    case LoraKind::Lora:
      return Shape{up.size(0), down.size(1)};
    case LoraKind::LoKr: {
      const int64_t a = w1.defined() ? w1.size(0) : w1_a.size(0),
                    b = w1.defined() ? w1.size(1) : w1_b.size(1);
      const int64_t c = w2.defined() ? w2.size(0) : w2_a.size(0),
                    d = w2.defined() ? w2.size(1) : w2_b.size(1);
      return Shape{a * c, b * d};
    }
    case LoraKind::LoHa:
      return Shape{w1_a.size(0), w1_b.size(1)};
  }
  return Shape{};
}

float LoraModule::factor() const {
  if (scale) return *scale;
  // A LoKr module with both halves whole has no rank: alpha does not apply (LyCORIS sets alpha to
  // its dim there, and ComfyUI uses 1).
  if (alpha && rank() > 0) return *alpha / static_cast<float>(rank());
  return 1.0f;
}

LoraFile parse_lora(const std::map<std::string, Tensor>& tensors,
                    const std::map<std::string, std::string>& metadata, const std::string& description) {
  LoraFile out;
  out.path = description;
  FLUXRT_CHECK(!tensors.empty(), ErrorCode::Format, "{}: no tensors: not a LoRA file", description);
  for (const auto& [key, t] : tensors) {
    const std::string refused = refused_format(key);
    if (!refused.empty())
      fail(ErrorCode::Unsupported,
           "{}: {} tensors are not supported (first: '{}'); LoRA, LoKr, LoHa and DoRA files load",
           description, refused, key);
    FLUXRT_CHECK(!is_tucker_core(key), ErrorCode::Format,
                 "{}: '{}' is a Tucker core, which only a convolution has; FLUX's adapted layers are linear",
                 description, key);
  }
  const PeftMetadata peft = read_peft_metadata(metadata, description);

  std::map<std::string, LoraModule> by_module;
  std::map<std::string, LoraKind> kinds;  // set by the first A / B / LoKr / LoHa tensor
  std::vector<std::string> unmatched;
  std::set<std::string> formats;
  for (const auto& [key, t] : tensors) {
    const Suffix* suffix = nullptr;
    for (const Suffix& s : kSuffixes)
      if (ends_with(key, s.text)) {
        suffix = &s;
        break;
      }
    // `.down/.up.weight` are XLabs' only (elsewhere they would be a model's own layer names).
    if (suffix && (suffix->role == Role::Down || suffix->role == Role::Up) &&
        !starts_with(suffix->text, ".lora") && !contains(key, ".processor."))
      suffix = nullptr;
    const std::string raw_stem = suffix ? key.substr(0, key.size() - std::string(suffix->text).size()) : key;
    const std::optional<std::string> te = text_encoder_module(raw_stem);
    const std::string stem = te ? raw_stem : strip_prefixes(raw_stem);
    std::optional<std::string> module = !suffix ? std::nullopt : te ? te : dotted_module(stem);
    if (!module || module->empty()) {
      unmatched.push_back(key);
      continue;
    }
    LoraModule& m = by_module[*module];
    if (m.key.empty()) m.key = raw_stem;
    formats.insert(te ? text_encoder_format_of_key(key) : format_of_key(key, stem, *module));
    const std::string what = description + ": '" + key + "'";
    switch (suffix->role) {
      case Role::Down:
        m.down = t;
        break;
      case Role::Up:
        m.up = t;
        break;
      case Role::Alpha:
        m.alpha = scalar_of(t, what);
        break;
      case Role::Scale:
        m.scale = scalar_of(t, what);
        break;
      case Role::W1:
        m.w1 = t;
        break;
      case Role::W1A:
        m.w1_a = t;
        break;
      case Role::W1B:
        m.w1_b = t;
        break;
      case Role::W2:
        m.w2 = t;
        break;
      case Role::W2A:
        m.w2_a = t;
        break;
      case Role::W2B:
        m.w2_b = t;
        break;
      case Role::HadaW1A:
        m.w1_a = t;
        break;
      case Role::HadaW1B:
        m.w1_b = t;
        break;
      case Role::HadaW2A:
        m.w2_a = t;
        break;
      case Role::HadaW2B:
        m.w2_b = t;
        break;
      case Role::Dora:
      case Role::Peft:
        m.magnitude = t;
        m.magnitude_eps = suffix->role == Role::Dora;
        break;
    }
    if (const std::optional<LoraKind> kind = kind_of(suffix->role)) {
      const auto seen = kinds.find(*module);
      FLUXRT_CHECK(seen == kinds.end() || seen->second == *kind, ErrorCode::Format,
                   "{}: LoRA module '{}' mixes {} and {} tensors", description, raw_stem,
                   lora_kind_name(seen == kinds.end() ? *kind : seen->second), lora_kind_name(*kind));
      m.kind = *kind;
      kinds[*module] = *kind;
    }
    if (!m.alpha && suffix->role != Role::Alpha) {
      const bool t5 = te && starts_with(*module, kT5TextModulePrefix);
      const PeftAlphas& alphas = !te ? peft.transformer : t5 ? peft.text_encoder_2 : peft.text_encoder;
      for (const auto& [pattern, a] : alphas.pattern)
        if (stem == pattern || ends_with(stem, "." + pattern)) m.alpha = a;
      if (!m.alpha && alphas.lora_alpha) m.alpha = alphas.lora_alpha;
    }
  }
  if (!unmatched.empty()) {
    for (const auto& k : unmatched)
      FLUXRT_LOG_WARN("{}: LoRA key matches no FLUX layer: '{}'", description, k);
    std::string first;
    for (size_t i = 0; i < unmatched.size() && i < 4; ++i) first += (i ? "', '" : "'") + unmatched[i] + "'";
    fail(ErrorCode::Format, "{}: {} LoRA key(s) match no FLUX layer or LoRA scheme (all in the log): {}{}",
         description, unmatched.size(), first, unmatched.size() > 4 ? "', ..." : "'");
  }
  for (auto& [name, m] : by_module) {
    FLUXRT_CHECK(kinds.count(name) != 0, ErrorCode::Format,
                 "{}: LoRA module '{}' has no weights (lora_A / lora_down, lokr_w1, hada_w1_a), only {}",
                 description, m.key, m.dora() ? "a DoRA magnitude" : "an alpha / scale");
    check_module(m, description);
    m.module = name;
    out.modules.push_back(std::move(m));
  }
  for (const auto& f : formats) out.format += (out.format.empty() ? "" : " + ") + f;
  return out;
}

LoraFile read_lora_file(const std::string& path) {
  const auto file = io::SafetensorsFile::open(path);
  std::map<std::string, Tensor> tensors;
  for (const auto& info : file->tensors()) tensors.emplace(info.name, file->tensor(info.name));
  return parse_lora(tensors, file->metadata(), path);
}

}  // namespace fluxrt::models
