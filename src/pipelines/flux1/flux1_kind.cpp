// FLUX.1, FLUX.1 Fill and FLUX.1 Kontext as the registry knows them (pipelines/pipeline.h
// PipelineKind): their folders, what their requests may carry, how they recognise their
// transformers, and the factory (one Flux1Pipeline for the three).
#include <fmt/format.h>

#include <memory>

#include "core/error.h"
#include "models/flux/flux1_names.h"
#include "models/flux/flux_checkpoint_shape.h"
#include "models/flux/flux_lora_names.h"
#include "models/fp8_weights.h"
#include "pipelines/flux1/flux1_fill.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/pipeline.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;

// The released FLUX.1 transformers' sizes (flux-reference.md section 1.1): dev and Fill-dev are
// guidance-distilled.
struct KnownShape {
  const char* variant;
  const char* description;
  int64_t hidden, double_blocks, single_blocks, context_dim, in_channels;
  bool guidance;
};
constexpr KnownShape kKnownShapes[] = {
    {"flux.1-dev", "FLUX.1-dev", 3072, 19, 38, 4096, 64, true},
    {"flux.1-schnell", "FLUX.1-schnell", 3072, 19, 38, 4096, 64, false},
    {"flux.1-fill-dev", "FLUX.1-Fill-dev", 3072, 19, 38, 4096, kFlux1FillInChannels, true},
};

bool is_fill_shape(const TransformerShape& s) { return s.in_channels == kFlux1FillInChannels; }
bool is_plain_shape(const TransformerShape& s) { return !is_fill_shape(s); }

// FLUX.2's shared modulation is checked first: a FLUX.2 checkpoint is never taken for FLUX.1's.
// `fill`: the Fill transformer's (its input widened by the masked image and the mask), else the
// others'.
bool read_family_shapes(const std::map<std::string, Shape>& shapes, VariantInfo& v, bool fill) {
  const std::optional<models::FluxCheckpointShape> s = models::read_flux_checkpoint_shape(shapes);
  if (!s || s->shared_modulation || !s->pooled_text_embedder) return false;
  if ((s->in_channels == kFlux1FillInChannels) != fill) return false;
  take_flux_checkpoint_shape(*s, v);
  return true;
}
bool read_shapes(const std::map<std::string, Shape>& shapes, VariantInfo& v) {
  return read_family_shapes(shapes, v, /*fill=*/false);
}
bool read_fill_shapes(const std::map<std::string, Shape>& shapes, VariantInfo& v) {
  return read_family_shapes(shapes, v, /*fill=*/true);
}

// FluxTransformer2DModel's defaults are FLUX.1's sizes, without the guidance embedding.
TransformerShape read_config(const fs::path& config_json) {
  return read_flux_transformer_config(config_json, {.head_dim = 128,
                                                    .num_heads = 24,
                                                    .double_blocks = 19,
                                                    .single_blocks = 38,
                                                    .in_channels = 64,
                                                    .context_dim = 4096,
                                                    .guidance_embed = false});
}

// The CLIP (vocab.json + merges.txt) and T5 (spiece.model) tokenizers checked in with the tiny
// FLUX.1 test folder, or installed next to the executable.
fs::path find_flux1_tokenizer(const char* name, const fs::path& src, const fs::path& share) {
  std::string looked;
  for (const fs::path& base :
       {src / "tests" / "data" / "models" / "flux1-dev-tiny", share / "tokenizers" / "flux1"}) {
    if (base.parent_path().empty()) continue;
    std::error_code ec;
    if (fs::is_directory(base / name, ec)) return base / name;
    looked += (looked.empty() ? "" : ", ") + (base / name).string();
  }
  fail(ErrorCode::NotFound, "bench pipeline: no FLUX.1 {} folder found (looked in {})", name, looked);
}

// FLUX.1 through Flux1Pipeline::synthetic with shared block weights (Flux1Config::
// shared_block_weights: the same shapes, FLOPs and bytes streamed per block, about 1 GB resident),
// in low-memory order: 12B parameters (24 GB of bf16) next to T5-XXL (9.5 GB).
SyntheticPipeline synthetic(const SyntheticRequest& request) {
  // flux.1-tiny: the tiny test folder's shapes (a smoke test of this path, nothing shared).
  const bool tiny = request.variant == "flux.1-tiny";
  FLUXRT_CHECK(!request.weights, ErrorCode::InvalidArgument,
               "bench pipeline: --weights {} is for FLUX.2 klein (FLUX.1's synthetic weights are bf16)",
               request.weights_name);
  const fs::path clip_tokenizer = find_flux1_tokenizer("tokenizer", request.source_dir, request.share_dir);
  const fs::path t5_tokenizer = find_flux1_tokenizer("tokenizer_2", request.source_dir, request.share_dir);
  SyntheticPipeline s;
  s.variant = tiny ? request.variant : request.variant + " (blocks share weights)";
  s.always_low_memory = true;
  const std::string made = tiny ? request.variant : request.variant + models::kFlux1SharedBlocksSuffix;
  s.make = [made, clip_tokenizer, t5_tokenizer](const PipelineOptions& options) -> std::unique_ptr<Pipeline> {
    return Flux1Pipeline::synthetic(made, clip_tokenizer, t5_tokenizer, options);
  };
  s.shapes_note = [variant = request.variant](const Pipeline& pipeline) {
    const models::Flux1Config& shapes = static_cast<const Flux1Pipeline&>(pipeline).transformer_config();
    if (!shapes.shared_block_weights)
      return fmt::format("synthetic: {} shapes, random weights, low-memory order", variant);
    return fmt::format(
        "synthetic: {} shapes ({:.2f}B parameters); the {} double blocks share one weight set and the {} "
        "single "
        "blocks share one (same shapes, FLOPs and weight bytes streamed per block as the real model); CLIP-L "
        "and "
        "T5-XXL unshared; low-memory order (text encoders freed before the transformer is made)",
        variant, static_cast<double>(shapes.parameter_count()) / 1e9, shapes.double_blocks,
        shapes.single_blocks);
  };
  // The config's input width is Fill's 384 channels where it is Fill (the input projection grows).
  s.flops_per_forward = [](const Pipeline& pipeline, int64_t image_tokens, int64_t text_tokens) {
    return static_cast<const Flux1Pipeline&>(pipeline).transformer_config().flops_per_forward(image_tokens,
                                                                                              text_tokens);
  };
  // Kontext's image tokens join the noise tokens in every block (and the output projection, whose
  // extra rows the pipeline drops).
  s.flops_with_references = [](const Pipeline& pipeline, int64_t image_tokens, int64_t text_tokens,
                               int64_t reference_tokens) {
    return static_cast<const Flux1Pipeline&>(pipeline).transformer_config().flops_per_forward(
        image_tokens + reference_tokens, text_tokens);
  };
  return s;
}

// FLUX.1 has no distilled / base choice (dev's guidance distillation is in its shapes).
void name_variant(VariantInfo& v) {
  const TransformerShape& s = v.shape;
  v.variant = "custom";
  v.runs = true;
  v.distilled.reset();
  v.distilled_from.clear();
  for (const KnownShape& k : kKnownShapes) {
    if (k.hidden == s.hidden_size && k.double_blocks == s.double_blocks &&
        k.single_blocks == s.single_blocks && k.context_dim == s.context_dim &&
        k.in_channels == s.in_channels && k.guidance == s.guidance_embed) {
      v.variant = k.variant;
      v.description = k.description;
    }
  }
  if (v.variant != "custom") return;
  v.description = fmt::format("flux.1{} (custom: hidden {}, {}+{} blocks, {})",
                              is_fill_shape(s) ? " fill" : "", s.hidden_size, s.double_blocks,
                              s.single_blocks, s.guidance_embed ? "guidance" : "no guidance");
}

// What FLUX.1's kinds share: the components, the text encoders, the transformer's names.
PipelineKind make_flux1_family_kind() {
  PipelineKind k;
  k.weight_components = {"transformer", "text_encoder", "text_encoder_2", "vae"};
  k.text_encoder_component = "text_encoder_2";
  k.detection.model_family = "flux.1";
  k.detection.config_class = "FluxTransformer2DModel";
  k.detection.read_config = &read_config;
  k.detection.name_variant = &name_variant;
  k.lora_scheme = &models::flux1_lora_scheme();
  k.load = [](const fs::path& root, const PipelineOptions& options) -> std::unique_ptr<Pipeline> {
    return Flux1Pipeline::load(root, options);
  };
  k.describe = &Flux1Pipeline::describe;
  k.plan = &Flux1Pipeline::plan_for;
  k.validate_size = &Flux1Pipeline::validate_size;
  // fp8 weights with their scales, as Flux1Transformer's loader reads them.
  k.bfl_checkpoint = [](const models::TensorStore& raw) {
    return models::flux1_canonical_to_bfl(models::flux1_to_canonical(models::fp8_weights_quantized(raw)));
  };
  return k;
}

PipelineKind make_flux1_kind() {
  PipelineKind k = make_flux1_family_kind();
  k.name = "FLUX.1";
  k.pipeline_class = "FluxPipeline";
  k.other_classes = {"FluxImg2ImgPipeline", "FluxInpaintPipeline"};  // the same folder layout and components
  k.detection.read_shapes = &read_shapes;
  k.detection.takes_shape = &is_plain_shape;
  k.bench_variants = {"flux.1-dev", "flux.1-schnell", "flux.1-tiny"};
  k.synthetic = &synthetic;
  return k;
}

// FluxFillPipeline's folders: FLUX.1's layout with a transformer whose input carries the masked
// image's latents and the mask (flux1_fill.h).
PipelineKind make_flux1_fill_kind() {
  PipelineKind k = make_flux1_family_kind();
  k.name = "FLUX.1 Fill";
  k.pipeline_class = "FluxFillPipeline";
  k.detection.read_shapes = &read_fill_shapes;
  k.detection.takes_shape = &is_fill_shape;
  k.bench_variants = {"flux.1-fill-dev"};  // with `bench pipeline --mask`
  k.synthetic = &synthetic;
  return k;
}

// FluxKontextPipeline's folders: FLUX.1's layout and dev's transformer shapes, so only the folder's
// model_index.json tells them apart, never a checkpoint; the image it edits is a reference image
// (flux1_kontext.h).
bool never_from_shapes(const std::map<std::string, Shape>&, VariantInfo&) { return false; }
bool never_from_config(const TransformerShape&) { return false; }

PipelineKind make_flux1_kontext_kind() {
  PipelineKind k = make_flux1_family_kind();
  k.name = "FLUX.1 Kontext";
  k.pipeline_class = "FluxKontextPipeline";
  k.detection.read_shapes = &never_from_shapes;
  k.detection.takes_shape = &never_from_config;
  k.transformers_of = &flux1_kind;
  k.bench_variants = {"flux.1-kontext-dev"};  // with `bench pipeline --references 1`
  k.synthetic = &synthetic;
  return k;
}

}  // namespace

const PipelineKind& flux1_kontext_kind() {
  static const PipelineKind kind = make_flux1_kontext_kind();
  return kind;
}

const PipelineKind& flux1_kind() {
  static const PipelineKind kind = make_flux1_kind();
  return kind;
}

const PipelineKind& flux1_fill_kind() {
  static const PipelineKind kind = make_flux1_fill_kind();
  return kind;
}

}  // namespace fluxrt::pipelines
