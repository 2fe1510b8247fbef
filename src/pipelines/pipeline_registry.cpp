// The registry of pipeline families (pipelines/pipeline.h): the one place that knows which
// diffusers classes and transformer checkpoints each family runs.
#include <memory>

#include "pipelines/flux1_pipeline.h"
#include "pipelines/flux2_klein_pipeline.h"
#include "pipelines/pipeline.h"

namespace fluxrt::pipelines {
namespace {

PipelineKind make_flux2_klein_kind() {
  PipelineKind k;
  k.family = PipelineFamily::Flux2Klein;
  k.name = "FLUX.2 klein";
  k.pipeline_class = "Flux2KleinPipeline";
  k.weight_components = {"transformer", "text_encoder", "vae"};
  k.text_encoder_component = "text_encoder";
  // FLUX.2 dev is another pipeline (Mistral text encoder), which fluxrt does not run.
  k.takes_transformer = [](const io::VariantInfo& info) {
    return info.family == io::ModelFamily::Flux2 && info.variant != io::ModelVariant::Flux2Dev;
  };
  k.load = [](const std::filesystem::path& root,
              const PipelineOptions& options) -> std::unique_ptr<Pipeline> {
    return Flux2KleinPipeline::load(root, options);
  };
  k.describe = &Flux2KleinPipeline::describe;
  k.plan = &Flux2KleinPipeline::plan_for;
  k.validate_size = &Flux2KleinPipeline::validate_size;
  return k;
}

PipelineKind make_flux1_kind() {
  PipelineKind k;
  k.family = PipelineFamily::Flux1;
  k.name = "FLUX.1";
  k.pipeline_class = "FluxPipeline";
  k.other_classes = {"FluxImg2ImgPipeline"};  // the same folder layout and components
  k.weight_components = {"transformer", "text_encoder", "text_encoder_2", "vae"};
  k.text_encoder_component = "text_encoder_2";
  k.takes_transformer = [](const io::VariantInfo& info) { return info.family == io::ModelFamily::Flux1; };
  k.load = [](const std::filesystem::path& root,
              const PipelineOptions& options) -> std::unique_ptr<Pipeline> {
    return Flux1Pipeline::load(root, options);
  };
  k.describe = &Flux1Pipeline::describe;
  k.plan = &Flux1Pipeline::plan_for;
  k.validate_size = &Flux1Pipeline::validate_size;
  return k;
}

}  // namespace

bool PipelineKind::accepts_class(std::string_view class_name) const {
  if (class_name == pipeline_class) return true;
  for (const std::string& other : other_classes)
    if (class_name == other) return true;
  return false;
}

const PipelineKind& flux2_klein_kind() {
  static const PipelineKind kind = make_flux2_klein_kind();
  return kind;
}

const PipelineKind& flux1_kind() {
  static const PipelineKind kind = make_flux1_kind();
  return kind;
}

const std::vector<const PipelineKind*>& pipeline_kinds() {
  static const std::vector<const PipelineKind*> kinds{&flux2_klein_kind(), &flux1_kind()};
  return kinds;
}

const PipelineKind* find_pipeline_kind(std::string_view pipeline_class) {
  for (const PipelineKind* kind : pipeline_kinds())
    if (kind->accepts_class(pipeline_class)) return kind;
  return nullptr;
}

const PipelineKind* pipeline_kind_for_transformer(const io::VariantInfo& transformer) {
  for (const PipelineKind* kind : pipeline_kinds())
    if (kind->takes_transformer(transformer)) return kind;
  return nullptr;
}

std::string supported_pipelines_text() {
  std::string text;
  const std::vector<const PipelineKind*>& kinds = pipeline_kinds();
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (i > 0) text += i + 1 == kinds.size() ? " and " : ", ";
    text += std::string(kinds[i]->pipeline_class) + " (" + kinds[i]->name + ")";
  }
  return text;
}

}  // namespace fluxrt::pipelines
