// Variant detection over the registry (pipelines/variant.h): the generic steps, with each family's
// own knowledge asked of its PipelineKind's detection.
#include "pipelines/variant.h"

#include <fmt/format.h>

#include "io/json_file.h"
#include "pipelines/pipeline.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool known_config_class(const std::string& class_name) {
  for (const PipelineKind* kind : pipeline_kinds())
    if (class_name == kind->detection.config_class) return true;
  return false;
}

// The kind whose config_class and shape a config.json has, with the shape read; null when none.
const PipelineKind* kind_of_config(const std::string& class_name, const fs::path& config_json,
                                   TransformerShape* shape) {
  for (const PipelineKind* kind : pipeline_kinds()) {
    if (class_name != kind->detection.config_class) continue;
    const TransformerShape s = kind->detection.read_config(config_json);
    if (kind->detection.takes_shape && !kind->detection.takes_shape(s)) continue;
    *shape = s;
    return kind;
  }
  return nullptr;
}

void recognised_by(const PipelineKind& kind, VariantInfo& v) {
  v.kind = &kind;
  v.family = kind.detection.model_family;
}

// The single file's name against the components folder's model_index.json, which is taken: the
// file name is a guess (a renamed or re-quantized file keeps whatever name it was given).
void take_distilled(VariantInfo& v, const io::ResolvedModel& model, const io::ResolvedModel* components,
                    std::optional<bool>* file_name_says) {
  if (model.is_distilled.has_value()) {
    v.distilled = model.is_distilled;
    v.distilled_from = "model_index.json";
    return;
  }
  if (model.source != io::ModelSource::SingleFile) return;
  const auto from_name = v.kind->detection.distilled_from_file_name;
  if (from_name) *file_name_says = from_name(model.path);
  if (components && components->is_distilled.has_value()) {
    v.distilled = components->is_distilled;
    v.distilled_from = "model_index.json";
  } else if (file_name_says->has_value()) {
    v.distilled = *file_name_says;
    v.distilled_from = "file name";
  }
}

const char* distilled_word(bool distilled) { return distilled ? "distilled" : "base"; }

// The folder's own class, else a single file's name, else the components folder's class: any of
// them naming the recipe selects it (a KV file run with a plain klein-9B folder's components is
// the common case, so the file name is not overruled by that folder).
void take_reference_kv(VariantInfo& v, const io::ResolvedModel& model, const io::ResolvedModel* components) {
  const TransformerDetection& d = v.kind->detection;
  if (!d.reference_kv_from_class || !d.reference_kv_from_file_name) return;
  if (d.reference_kv_from_class(model.pipeline_class)) {
    v.reference_kv_from = "model_index.json";
  } else if (model.source == io::ModelSource::SingleFile && d.reference_kv_from_file_name(model.path)) {
    v.reference_kv_from = "file name";
  } else if (components && d.reference_kv_from_class(components->pipeline_class)) {
    v.reference_kv_from = components->path + "/model_index.json";
  }
  v.reference_kv = !v.reference_kv_from.empty();
}

}  // namespace

VariantInfo detect_variant_from_shapes(const std::map<std::string, Shape>& shapes) {
  VariantInfo v;
  for (const PipelineKind* kind : pipeline_kinds()) {
    if (!kind->detection.read_shapes(shapes, v)) continue;
    recognised_by(*kind, v);
    kind->detection.name_variant(v);
    return v;
  }
  v = VariantInfo{};
  v.description = "not a FLUX transformer checkpoint";
  return v;
}

VariantInfo detect_variant(const io::ResolvedModel& model, const io::ResolvedModel* components) {
  const io::ModelComponent* tc = model.transformer();
  if (tc == nullptr || !tc->present) {
    VariantInfo v;
    v.description = tc == nullptr ? "no transformer component" : "transformer folder missing";
    // A GGUF text encoder (resolve_single_file names it by general.architecture): say how it is used.
    const io::ModelComponent* te = model.find("text_encoder");
    if (tc == nullptr && model.source == io::ModelSource::SingleFile && te &&
        te->class_name.rfind("gguf:", 0) == 0)
      v.description = fmt::format("a {} text encoder, not a transformer (run it with --text-encoder FILE)",
                                  te->class_name.substr(5));
    return v;
  }
  VariantInfo v;
  if (!tc->weights.empty()) v = detect_variant_from_shapes(io::tensor_shapes(tc->weights));
  const fs::path config_path = tc->folder.empty() ? fs::path() : fs::path(tc->folder) / "config.json";
  TransformerShape config_shape;
  const PipelineKind* by_class = known_config_class(tc->class_name) && is_file(config_path)
                                     ? kind_of_config(tc->class_name, config_path, &config_shape)
                                     : nullptr;
  if (by_class) {
    // config.json is what diffusers builds the model from; the tensors still say the layout.
    recognised_by(*by_class, v);
    v.shape = config_shape;
  } else if (!tc->class_name.empty() && !known_config_class(tc->class_name) && v.kind == nullptr) {
    v.description = fmt::format("not a FLUX transformer (class {})", tc->class_name);
    return v;
  }
  if (v.kind == nullptr) return v;
  v.distilled.reset();
  v.distilled_from.clear();
  std::optional<bool> file_name_says;
  take_distilled(v, model, components, &file_name_says);
  take_reference_kv(v, model, components);
  v.kind->detection.name_variant(v);
  // Only a components folder's word can differ from the file name's (take_distilled).
  if (v.distilled.has_value() && file_name_says.has_value() && *file_name_says != *v.distilled)
    v.notes.push_back(
        fmt::format("{}: the file name says {}, {}/model_index.json says is_distilled {}: running it "
                    "as {}, as the folder says",
                    model.path, distilled_word(*file_name_says), components->path,
                    *v.distilled ? "true" : "false", distilled_word(*v.distilled)));
  return v;
}

void take_flux_checkpoint_shape(const models::FluxCheckpointShape& s, VariantInfo& v) {
  v.layout = s.bfl_names ? "bfl" : "diffusers";
  v.key_prefix = s.key_prefix;
  v.shape = {s.hidden_size,   s.head_dim,    s.num_heads,   s.double_blocks,
             s.single_blocks, s.in_channels, s.context_dim, s.guidance_embed};
}

TransformerShape read_flux_transformer_config(const fs::path& config_json, const TransformerShape& defaults) {
  const nlohmann::json cfg = io::read_json_object(config_json);
  TransformerShape s;
  s.head_dim = io::json_int(cfg, "attention_head_dim", defaults.head_dim);
  s.num_heads = io::json_int(cfg, "num_attention_heads", defaults.num_heads);
  s.hidden_size = s.head_dim * s.num_heads;
  s.double_blocks = io::json_int(cfg, "num_layers", defaults.double_blocks);
  s.single_blocks = io::json_int(cfg, "num_single_layers", defaults.single_blocks);
  s.in_channels = io::json_int(cfg, "in_channels", defaults.in_channels);
  s.context_dim = io::json_int(cfg, "joint_attention_dim", defaults.context_dim);
  s.guidance_embed = io::json_bool(cfg, "guidance_embeds", defaults.guidance_embed);
  return s;
}

}  // namespace fluxrt::pipelines
