// inspect_model: discovery + variant + header statistics per component, for `fluxrt info`.
#include "io/model_info.h"

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "io/safetensors.h"

namespace fluxrt::io {

std::string_view model_source_name(ModelSource source) {
  switch (source) {
    case ModelSource::PipelineFolder: return "diffusers-folder";
    case ModelSource::ComponentFolder: return "component-folder";
    case ModelSource::SingleFile: return "single-file";
  }
  return "unknown";
}

ModelReport inspect_model(const std::string& spec) { return inspect_model(spec, hf_hub_cache_dir()); }

ModelReport inspect_model(const std::string& spec, const std::string& hub_cache_dir) {
  ModelReport report;
  report.model = resolve_model(spec, hub_cache_dir);
  // Open every component first so a corrupt file is reported as such, not as an odd variant.
  for (const ModelComponent& c : report.model.components) {
    ComponentReport r;
    r.name = c.name;
    r.library = c.library;
    r.class_name = c.class_name;
    r.folder = c.folder;
    r.weights = c.weights;
    r.present = c.present;
    if (!c.weights.empty()) {
      const Checkpoint ckpt = Checkpoint::open(c.weights);
      r.files = ckpt.files().size();
      for (const auto& file : ckpt.files()) {
        for (const TensorInfo& t : file->tensors()) {
          ++r.tensors;
          r.parameters += static_cast<uint64_t>(t.shape.numel());
          r.bytes += t.nbytes();
          ++r.dtypes[std::string(dtype_name(t.dtype))];
        }
      }
    }
    report.components.push_back(std::move(r));
  }
  report.variant = detect_variant(report.model);
  return report;
}

std::string model_report_json(const ModelReport& report) {
  using json = nlohmann::ordered_json;
  const ResolvedModel& m = report.model;
  const VariantInfo& v = report.variant;
  json root;
  root["spec"] = m.spec;
  root["path"] = m.path;
  root["source"] = model_source_name(m.source);
  if (!m.repo_id.empty()) {
    root["repo_id"] = m.repo_id;
    root["revision"] = m.revision;
  }
  if (!m.pipeline_class.empty()) root["pipeline_class"] = m.pipeline_class;
  json variant;
  variant["description"] = v.description;
  variant["family"] = model_family_name(v.family);
  variant["variant"] = model_variant_name(v.variant);
  variant["layout"] = weight_layout_name(v.layout);
  if (!v.key_prefix.empty()) variant["key_prefix"] = v.key_prefix;
  variant["distilled"] = v.distilled.has_value() ? json(*v.distilled) : json(nullptr);
  if (!v.distilled_from.empty()) variant["distilled_from"] = v.distilled_from;
  if (v.family != ModelFamily::Unknown) {
    const TransformerShape& s = v.shape;
    variant["hidden_size"] = s.hidden_size;
    variant["num_heads"] = s.num_heads;
    variant["head_dim"] = s.head_dim;
    variant["double_blocks"] = s.double_blocks;
    variant["single_blocks"] = s.single_blocks;
    variant["in_channels"] = s.in_channels;
    variant["context_dim"] = s.context_dim;
    variant["guidance_embed"] = s.guidance_embed;
  }
  root["variant"] = variant;
  json components = json::array();
  for (const ComponentReport& c : report.components) {
    json j;
    j["name"] = c.name;
    j["library"] = c.library;
    j["class_name"] = c.class_name;
    j["present"] = c.present;
    if (!c.folder.empty()) j["folder"] = c.folder;
    if (!c.weights.empty()) j["weights"] = c.weights;
    j["files"] = c.files;
    j["tensors"] = c.tensors;
    j["parameters"] = c.parameters;
    j["bytes"] = c.bytes;
    json dtypes = json::object();
    for (const auto& [name, count] : c.dtypes) dtypes[name] = count;
    j["dtypes"] = dtypes;
    components.push_back(j);
  }
  root["components"] = components;
  return root.dump(2, ' ', false, json::error_handler_t::replace);
}

}  // namespace fluxrt::io
