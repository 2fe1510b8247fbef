// FLUX.2 klein as the registry knows it (pipelines/pipeline.h PipelineKind): its folders, what its
// requests may carry, how it recognises its transformers, and its factory.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <memory>

#include "core/error.h"
#include "models/flux/flux2_names.h"
#include "models/flux/flux_checkpoint_shape.h"
#include "models/flux/flux_lora_names.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "pipelines/pipeline.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;

// The released FLUX.2 transformers' sizes (flux-reference.md section 1.1). FLUX.2 dev is another
// pipeline (Mistral text encoder), which fluxrt does not run: known so it can be refused by name.
struct KnownShape {
  const char* variant;
  int64_t hidden, double_blocks, single_blocks, context_dim, in_channels;
  bool guidance;
};
constexpr KnownShape kKnownShapes[] = {
    {"flux.2-klein-4b", 3072, 5, 20, 7680, 128, false},
    {"flux.2-klein-9b", 4096, 8, 24, 12288, 128, false},
    {"flux.2-dev", 6144, 8, 48, 15360, 128, true},
};
constexpr const char* kFlux2Dev = "flux.2-dev";

bool read_shapes(const std::map<std::string, Shape>& shapes, VariantInfo& v) {
  const std::optional<models::FluxCheckpointShape> s = models::read_flux_checkpoint_shape(shapes);
  if (!s || !s->shared_modulation) return false;
  take_flux_checkpoint_shape(*s, v);
  return true;
}

// Flux2Transformer2DModel's defaults are FLUX.2 dev's sizes.
TransformerShape read_config(const fs::path& config_json) {
  return read_flux_transformer_config(config_json, {.head_dim = 128,
                                                    .num_heads = 48,
                                                    .double_blocks = 8,
                                                    .single_blocks = 48,
                                                    .in_channels = 128,
                                                    .context_dim = 15360,
                                                    .guidance_embed = true});
}

// BFL names the base checkpoints "...klein-base-..."; a file renamed away from "klein" tells nothing.
std::optional<bool> distilled_from_file_name(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("klein") == std::string::npos) return std::nullopt;
  return name.find("base") == std::string::npos;
}

constexpr const char* kKvPipelineClass = "Flux2KleinKVPipeline";

bool reference_kv_from_class(const std::string& pipeline_class) { return pipeline_class == kKvPipelineClass; }

// BFL names the file "flux-2-klein-9b-kv.safetensors"; quantized copies keep the "-kv" (a
// "kv" token of the name, between separators, so that no other word containing "kv" counts).
bool reference_kv_from_file_name(const std::string& path) {
  std::string name = fs::path(path).stem().string();
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("klein") == std::string::npos) return false;
  for (size_t at = name.find("kv"); at != std::string::npos; at = name.find("kv", at + 1)) {
    const bool starts = at == 0 || !std::isalnum(static_cast<unsigned char>(name[at - 1]));
    const bool ends = at + 2 == name.size() || !std::isalnum(static_cast<unsigned char>(name[at + 2]));
    if (starts && ends) return true;
  }
  return false;
}

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

bool has_qwen_tokenizer(const fs::path& dir) {
  return path_exists(dir / "tokenizer.json") ||
         (path_exists(dir / "vocab.json") && path_exists(dir / "merges.txt"));
}

// The Qwen3 tokenizer and the scheduler config, which no weight component check covers.
void check_folder(const io::ResolvedModel& model) {
  const io::ModelComponent* tok = model.find("tokenizer");
  const fs::path tok_dir =
      tok && !tok->folder.empty() ? fs::path(tok->folder) : fs::path(model.path) / "tokenizer";
  FLUXRT_CHECK(has_qwen_tokenizer(tok_dir), ErrorCode::NotFound,
               "model {}: tokenizer not found (need {}/tokenizer.json or vocab.json + merges.txt)",
               model.path, tok_dir.string());
  const fs::path scheduler = fs::path(model.path) / "scheduler" / "scheduler_config.json";
  FLUXRT_CHECK(path_exists(scheduler), ErrorCode::NotFound, "model {}: {} not found", model.path,
               scheduler.string());
}

// The Qwen3 tokenizer a synthetic klein still needs for its prompt path: the bundled demo model's,
// else the tiny test model's.
fs::path find_qwen_tokenizer(const fs::path& src, const fs::path& share) {
  for (const fs::path& dir : {src / "models" / "demo" / "tokenizer",
                              src / "tests" / "data" / "models" / "flux2-klein-tiny" / "tokenizer",
                              share / "models" / "demo" / "tokenizer"})
    if (!dir.parent_path().empty() && has_qwen_tokenizer(dir)) return dir;
  fail(ErrorCode::NotFound,
       "no Qwen3 tokenizer found for the synthetic pipeline (looked in {}/models/demo/tokenizer, "
       "{}/tests/data/models/flux2-klein-tiny/tokenizer, {}/models/demo/tokenizer)",
       src.string(), src.string(), share.string());
}

SyntheticPipeline synthetic(const SyntheticRequest& request) {
  const fs::path tokenizer = find_qwen_tokenizer(request.source_dir, request.share_dir);
  SyntheticPipeline s;
  s.variant = request.variant;
  s.make = [variant = request.variant,
            tokenizer](const PipelineOptions& options) -> std::unique_ptr<Pipeline> {
    return Flux2KleinPipeline::synthetic(variant, tokenizer, options);
  };
  s.flops_per_forward = [](const Pipeline& pipeline, int64_t image_tokens, int64_t text_tokens) {
    return static_cast<const Flux2KleinPipeline&>(pipeline).transformer_config().flops_per_forward(
        image_tokens, text_tokens);
  };
  s.flops_with_references = [](const Pipeline& pipeline, int64_t image_tokens, int64_t text_tokens,
                               int64_t reference_tokens) {
    const auto& klein = static_cast<const Flux2KleinPipeline&>(pipeline);
    const models::Flux2Config& c = klein.transformer_config();
    return klein.defaults().reference_kv
               ? c.flops_per_forward_with_reference_kv(image_tokens, text_tokens, reference_tokens)
               : c.flops_per_forward(image_tokens + reference_tokens, text_tokens);
  };
  return s;
}

void name_variant(VariantInfo& v) {
  const TransformerShape& s = v.shape;
  v.variant = "custom";
  for (const KnownShape& k : kKnownShapes) {
    if (k.hidden == s.hidden_size && k.double_blocks == s.double_blocks &&
        k.single_blocks == s.single_blocks && k.context_dim == s.context_dim &&
        k.in_channels == s.in_channels && k.guidance == s.guidance_embed)
      v.variant = k.variant;
  }
  v.runs = v.variant != kFlux2Dev;
  const bool custom = v.variant == "custom";
  // klein's transformers have no guidance embedding; a custom FLUX.2 with one is not klein-sized.
  const bool klein = (!custom && v.variant != kFlux2Dev) || (custom && !s.guidance_embed);
  if (!klein) {
    v.distilled.reset();
    v.distilled_from.clear();
  }
  const std::string kind = !v.distilled.has_value() ? "distilled or base: unknown"
                           : *v.distilled           ? "distilled"
                                                    : "base";
  if (!klein) {
    v.reference_kv = false;
    v.reference_kv_from.clear();
  }
  const std::string recipe =
      v.reference_kv ? fmt::format("reference K/V caching, from the {}", v.reference_kv_from) : "";
  if (v.variant == kFlux2Dev) {
    v.description = "FLUX.2-dev (not supported)";
  } else if (!custom) {
    const char* size = v.variant == std::string("flux.2-klein-4b") ? "4B" : "9B";
    if (v.reference_kv)
      v.description = fmt::format("FLUX.2-klein-{}-KV ({})", size, recipe);
    else if (v.distilled.has_value() && !*v.distilled)
      v.description = fmt::format("FLUX.2-klein-base-{}", size);
    else
      v.description = fmt::format("FLUX.2-klein-{} ({})", size, kind);
  } else {
    std::string details =
        fmt::format("hidden {}, {}+{} blocks", s.hidden_size, s.double_blocks, s.single_blocks);
    if (s.guidance_embed) details += ", guidance";
    if (klein) details += ", " + (v.reference_kv ? recipe : kind);
    v.description = fmt::format("{} (custom: {})", klein ? "flux.2-klein" : "flux.2", details);
  }
  // The KV distillation runs only as its own pipeline (no inpainting, no CFG there).
  if (klein) {
    v.pipelines = v.reference_kv
                      ? std::vector<std::string>{kKvPipelineClass}
                      : std::vector<std::string>{"Flux2KleinPipeline", "Flux2KleinInpaintPipeline"};
  }
}

PipelineKind make_flux2_klein_kind() {
  PipelineKind k;
  k.name = "FLUX.2 klein";
  k.pipeline_class = "Flux2KleinPipeline";
  // Inpainting runs on the same folders: a request with a mask (klein_inpaint.h).
  // klein-9B-KV's folders name their own class (KleinModelDefaults::reference_kv).
  k.other_classes = {"Flux2KleinInpaintPipeline", kKvPipelineClass};
  k.weight_components = {"transformer", "text_encoder", "vae"};
  k.text_encoder_component = "text_encoder";
  k.detection.model_family = "flux.2";
  k.detection.config_class = "Flux2Transformer2DModel";
  k.detection.read_shapes = &read_shapes;
  k.detection.read_config = &read_config;
  k.detection.distilled_from_file_name = &distilled_from_file_name;
  k.detection.reference_kv_from_class = &reference_kv_from_class;
  k.detection.reference_kv_from_file_name = &reference_kv_from_file_name;
  k.detection.name_variant = &name_variant;
  k.lora_scheme = &models::flux2_lora_scheme();
  k.check_folder = &check_folder;
  // "-kv": the KV recipe on those shapes; BFL released only 9B-KV, 4B-KV is a smaller stand-in
  // for timing the recipe where the 9B does not fit.
  k.bench_variants = {"flux.2-klein-4b",          "flux.2-klein-9b",           "flux.2-klein-base-4b",
                      "flux.2-klein-base-9b",     "flux.2-klein-9b-kv",        "flux.2-klein-4b-kv",
                      kKleinTinySyntheticVariant, kKleinTinyKvSyntheticVariant};
  k.synthetic = &synthetic;
  k.load = [](const fs::path& root, const PipelineOptions& options) -> std::unique_ptr<Pipeline> {
    return Flux2KleinPipeline::load(root, options);
  };
  k.describe = &Flux2KleinPipeline::describe;
  k.plan = &Flux2KleinPipeline::plan_for;
  k.validate_size = &Flux2KleinPipeline::validate_size;
  k.bfl_checkpoint = [](const models::TensorStore& raw) {
    return models::flux2_canonical_to_bfl(models::flux2_to_canonical(raw));
  };
  return k;
}

}  // namespace

const PipelineKind& flux2_klein_kind() {
  static const PipelineKind kind = make_flux2_klein_kind();
  return kind;
}

}  // namespace fluxrt::pipelines
