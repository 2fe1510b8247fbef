// inspect_model: discovery + variant + header statistics per component, for `fluxrt info`, and
// the public fluxrt::inspect_model / model_info_json over it (include/fluxrt/model_info.h).
#include "runtime/model_info.h"

#include <cctype>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "pipelines/pipeline.h"

namespace fluxrt::runtime {

std::string_view model_source_name(io::ModelSource source) {
  switch (source) {
    case io::ModelSource::PipelineFolder:
      return "diffusers-folder";
    case io::ModelSource::ComponentFolder:
      return "component-folder";
    case io::ModelSource::SingleFile:
      return "single-file";
  }
  return "unknown";
}

ModelReport inspect_model(const std::string& spec) { return inspect_model(spec, io::hf_hub_cache_dir()); }

ModelReport inspect_model(const std::string& spec, const std::string& hub_cache_dir) {
  ModelReport report;
  report.model = io::resolve_model(spec, hub_cache_dir);
  // Open every component first so a corrupt file is reported as such, not as an odd variant.
  for (const io::ModelComponent& c : report.model.components) {
    ComponentReport r;
    r.name = c.name;
    r.library = c.library;
    r.class_name = c.class_name;
    r.folder = c.folder;
    r.weights = c.weights;
    r.present = c.present;
    if (!c.weights.empty() && io::is_gguf_file(c.weights)) {
      // GGUF: types by their GGML names ("q4_k"), bytes as stored (blocks included).
      const auto file = io::GgufFile::open(c.weights);
      r.files = 1;
      for (const io::GgufTensorInfo& t : file->tensors()) {
        ++r.tensors;
        r.parameters += static_cast<uint64_t>(t.numel());
        r.bytes += t.nbytes;
        std::string type(quant_name(t.type));
        for (char& ch : type) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        ++r.dtypes[type];
      }
    } else if (!c.weights.empty()) {
      const io::Checkpoint ckpt = io::Checkpoint::open(c.weights);
      r.files = ckpt.files().size();
      for (const auto& file : ckpt.files()) {
        for (const io::TensorInfo& t : file->tensors()) {
          ++r.tensors;
          r.parameters += static_cast<uint64_t>(t.shape.numel());
          r.bytes += t.nbytes();
          ++r.dtypes[std::string(dtype_name(t.dtype))];
        }
      }
    }
    report.components.push_back(std::move(r));
  }
  report.variant = pipelines::detect_variant(report.model);
  return report;
}

fluxrt::ModelInfo to_public(const ModelReport& report) {
  const io::ResolvedModel& m = report.model;
  const pipelines::VariantInfo& v = report.variant;
  fluxrt::ModelInfo info;
  info.spec = m.spec;
  info.path = m.path;
  info.source = std::string(model_source_name(m.source));
  info.repo_id = m.repo_id;
  info.revision = m.revision;
  info.pipeline_class = m.pipeline_class;
  info.description = v.description;
  auto or_unknown = [](const std::string& name) { return name.empty() ? std::string("unknown") : name; };
  info.family = or_unknown(v.family);
  info.variant = or_unknown(v.variant);
  info.layout = or_unknown(v.layout);
  info.key_prefix = v.key_prefix;
  info.distilled = v.distilled;
  info.distilled_from = v.distilled_from;
  if (v.kind != nullptr) {
    if (!v.pipelines.empty()) {
      info.pipelines = v.pipelines;
    } else {
      // A folder runs as the kind its model_index.json names (Kontext's transformer has dev's shapes).
      const pipelines::PipelineKind* folder_kind = pipelines::find_pipeline_kind(m.pipeline_class);
      const pipelines::PipelineKind& kind = folder_kind != nullptr ? *folder_kind : *v.kind;
      info.pipelines.push_back(kind.pipeline_class);
      for (const std::string& other : kind.other_classes) info.pipelines.push_back(other);
    }
    const pipelines::TransformerShape& s = v.shape;
    info.shape = fluxrt::TransformerShape{s.hidden_size,   s.head_dim,    s.num_heads,   s.double_blocks,
                                          s.single_blocks, s.in_channels, s.context_dim, s.guidance_embed};
  }
  for (const ComponentReport& c : report.components)
    info.components.push_back({c.name, c.library, c.class_name, c.folder, c.weights, c.present, c.files,
                               c.tensors, c.parameters, c.bytes, c.dtypes});
  return info;
}

std::string model_report_json(const ModelReport& report) {
  return fluxrt::model_info_json(to_public(report));
}

}  // namespace fluxrt::runtime

namespace fluxrt {

ModelInfo inspect_model(const std::string& model) {
  return runtime::to_public(runtime::inspect_model(model));
}

std::string model_info_json(const ModelInfo& info) {
  using json = nlohmann::ordered_json;
  json root;
  root["spec"] = info.spec;
  root["path"] = info.path;
  root["source"] = info.source;
  if (!info.repo_id.empty()) {
    root["repo_id"] = info.repo_id;
    root["revision"] = info.revision;
  }
  if (!info.pipeline_class.empty()) root["pipeline_class"] = info.pipeline_class;
  if (!info.pipelines.empty()) root["pipelines"] = info.pipelines;
  json variant;
  variant["description"] = info.description;
  variant["family"] = info.family;
  variant["variant"] = info.variant;
  variant["layout"] = info.layout;
  if (!info.key_prefix.empty()) variant["key_prefix"] = info.key_prefix;
  variant["distilled"] = info.distilled.has_value() ? json(*info.distilled) : json(nullptr);
  if (!info.distilled_from.empty()) variant["distilled_from"] = info.distilled_from;
  if (info.shape) {
    const TransformerShape& s = *info.shape;
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
  for (const ComponentInfo& c : info.components) {
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

}  // namespace fluxrt
