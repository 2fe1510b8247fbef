// The registry of pipeline families (pipelines/pipeline.h): the list of kinds, each defined with
// its family (klein_kind.cpp, flux1_kind.cpp: FLUX.1, FLUX.1 Fill and Kontext), and the look-ups over it.
#include <algorithm>

#include "core/error.h"
#include "pipelines/pipeline.h"

namespace fluxrt::pipelines {

bool PipelineKind::accepts_class(std::string_view class_name) const {
  if (class_name == pipeline_class) return true;
  for (const std::string& other : other_classes)
    if (class_name == other) return true;
  return false;
}

const std::vector<const PipelineKind*>& pipeline_kinds() {
  static const std::vector<const PipelineKind*> kinds{&flux2_klein_kind(), &flux1_kind(), &flux1_fill_kind(),
                                                      &flux1_kontext_kind()};
  return kinds;
}

const PipelineKind* find_pipeline_kind(std::string_view pipeline_class) {
  for (const PipelineKind* kind : pipeline_kinds())
    if (kind->accepts_class(pipeline_class)) return kind;
  return nullptr;
}

const PipelineKind& check_pipeline_folder(const io::ResolvedModel& model, bool transformer_from_file,
                                          bool text_encoder_from_file) {
  if (model.source != io::ModelSource::PipelineFolder)
    fail(ErrorCode::Unsupported,
         "model {} is a single {}: generate needs a diffusers pipeline folder (model_index.json and one "
         "folder "
         "per component): it runs {} folders",
         model.path, model.source == io::ModelSource::SingleFile ? "file" : "component folder",
         supported_pipelines_text());
  const PipelineKind* kind = find_pipeline_kind(model.pipeline_class);
  FLUXRT_CHECK(
      kind != nullptr, ErrorCode::Unsupported, "model {} is a {}: fluxrt generate supports {} folders",
      model.path,
      model.pipeline_class.empty() ? std::string("pipeline without a _class_name") : model.pipeline_class,
      supported_pipelines_text());
  auto needs = [&](const std::string& name) {
    return !(transformer_from_file && name == "transformer") &&
           !(text_encoder_from_file && name == kind->text_encoder_component);
  };
  for (const std::string& name : kind->weight_components) {
    if (!needs(name)) continue;
    const io::ModelComponent* c = model.find(name);
    FLUXRT_CHECK(c != nullptr && c->present && !c->weights.empty(), ErrorCode::NotFound,
                 "model {}: component {} is missing or has no weights (a partial download?)", model.path,
                 name);
  }
  if (kind->check_folder) kind->check_folder(model);
  return *kind;
}

const PipelineKind* pipeline_kind_for_transformer(const VariantInfo& transformer) {
  return transformer.runs ? transformer.kind : nullptr;
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

namespace {

std::vector<const models::LoraNameScheme*> lora_schemes() {
  std::vector<const models::LoraNameScheme*> schemes;
  for (const PipelineKind* kind : pipeline_kinds())
    if (std::find(schemes.begin(), schemes.end(), kind->lora_scheme) == schemes.end())
      schemes.push_back(kind->lora_scheme);
  return schemes;
}

}  // namespace

std::vector<const PipelineKind*> kinds_taking_lora(const models::LoraFile& lora) {
  const models::LoraFamily family = models::lora_family(lora, lora_schemes());
  std::vector<const PipelineKind*> kinds;
  for (const PipelineKind* kind : pipeline_kinds())
    if (family.scheme == nullptr || family.scheme == kind->lora_scheme) kinds.push_back(kind);
  return kinds;
}

std::string lora_family_name(const models::LoraFile& lora) {
  const std::vector<const models::LoraNameScheme*> schemes = lora_schemes();
  const models::LoraFamily family = models::lora_family(lora, schemes);
  if (family.scheme != nullptr) return family.scheme->family;
  std::vector<std::string> names;
  for (const models::LoraNameScheme* scheme : schemes) names.push_back(scheme->family);
  std::sort(names.begin(), names.end());
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i ? " or " : "") + names[i];
  return text + " (only shared layers)";
}

}  // namespace fluxrt::pipelines
