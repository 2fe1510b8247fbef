#pragma once
// What `fluxrt info` reports about a model: where it resolved to, which variant it is (asked of
// the pipeline kinds, pipelines/variant.h), and per component the tensor count, parameter count,
// dtypes and bytes. Reads headers only.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fluxrt/model_info.h"
#include "io/model_discovery.h"
#include "pipelines/variant.h"

namespace fluxrt::runtime {

struct ComponentReport {
  std::string name;        // "transformer", "text_encoder", ...
  std::string library;     // "diffusers", "transformers" or empty
  std::string class_name;  // from model_index.json / config.json, may be empty
  std::string folder;      // empty for a single file
  std::string weights;     // the file, index or folder the tensors came from; empty if none
  bool present = false;
  size_t files = 0;  // .safetensors files behind `weights`
  size_t tensors = 0;
  uint64_t parameters = 0;               // sum of element counts
  uint64_t bytes = 0;                    // sum of tensor data bytes
  std::map<std::string, size_t> dtypes;  // "bf16" -> tensor count
};

struct ModelReport {
  io::ResolvedModel model;
  pipelines::VariantInfo variant;
  std::vector<ComponentReport> components;
};

// Resolves `spec`, detects the variant and opens (validates) every component's weights.
// Throws fluxrt::Error for a bad path, a corrupt file or a folder that is not a model.
ModelReport inspect_model(const std::string& spec);
ModelReport inspect_model(const std::string& spec, const std::string& hub_cache_dir);

std::string_view model_source_name(io::ModelSource source);  // "diffusers-folder", ...
// The report in the public API's plain types (fluxrt::inspect_model returns it).
fluxrt::ModelInfo to_public(const ModelReport& report);
// The report as a JSON document (fluxrt::model_info_json of to_public: `fluxrt info --json`).
std::string model_report_json(const ModelReport& report);

}  // namespace fluxrt::runtime
