#pragma once
// Model discovery (DESIGN.md section 3.5): turns what a user passes as --model into local paths.
// Accepted:
//   * a diffusers pipeline folder (model_index.json + one folder per component),
//   * a single component folder (config.json + *.safetensors, e.g. a lone transformer/),
//   * a single .safetensors file (a transformer; companions come later),
//   * a Hugging Face repo id ("org/name" or "org/name@rev") already in the user's hub cache.
// Nothing is downloaded. No tensor data is read. Which family and variant a model is, is the
// pipeline kinds' to tell (pipelines/variant.h), from what is read here.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace fluxrt::io {

enum class ModelSource {
  PipelineFolder,   // model_index.json
  ComponentFolder,  // config.json and/or *.safetensors, no model_index.json
  SingleFile,       // one .safetensors file (or a *.safetensors.index.json)
};

// A pipeline component as listed in model_index.json ("transformer": ["diffusers", "Flux2..."]).
struct ModelComponent {
  std::string name;        // "transformer", "text_encoder", "vae", "tokenizer", "scheduler", ...
  std::string library;     // "diffusers", "transformers" (empty when unknown)
  std::string class_name;  // "Flux2Transformer2DModel", ... (empty when unknown)
  std::string folder;      // the component's folder; empty for a single file
  bool present = false;    // the folder (or file) exists; a partial hub download may lack some
  // What Checkpoint::open should be given: a .safetensors file, an index .json or a folder.
  // Empty when the component has no weights (tokenizer, scheduler) or they are missing.
  std::string weights;
};

struct ResolvedModel {
  std::string spec;  // what the user passed
  std::string path;  // the local folder or file it resolved to
  ModelSource source = ModelSource::PipelineFolder;
  std::string repo_id;   // set when resolved through the Hugging Face cache
  std::string revision;  // the snapshot folder name (a commit hash) for cache hits
  std::string pipeline_class;  // model_index.json "_class_name" (empty otherwise)
  std::optional<bool> is_distilled;  // model_index.json "is_distilled" when present
  std::vector<ModelComponent> components;

  const ModelComponent* find(std::string_view name) const;  // nullptr when absent
  // The component holding the denoiser: "transformer", or the only component of a file/folder.
  const ModelComponent* transformer() const;
};

// The Hugging Face hub cache folder: $HF_HUB_CACHE (or the older $HUGGINGFACE_HUB_CACHE), else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub
// (huggingface_hub's order).
std::string hf_hub_cache_dir();

// Resolves `spec` (see the top of this file). A spec that exists on disk is always taken as a
// path; "org/name[@rev]" that does not is looked up in hf_hub_cache_dir(). Errors: NotFound
// (saying where it looked), Format (a folder that is not a model, bad model_index.json).
ResolvedModel resolve_model(const std::string& spec);
// The same, with an explicit hub cache folder instead of the environment (tests use this).
ResolvedModel resolve_model(const std::string& spec, const std::string& hub_cache_dir);

// Finds "org/name" at `revision` (a branch/tag under refs/, or a snapshot folder name; empty means
// refs/main, falling back to the only or newest snapshot) in a hub cache folder and returns the
// snapshot folder.
std::string find_in_hub_cache(const std::string& repo_id, const std::string& revision,
                              const std::string& hub_cache_dir, std::string* resolved_revision = nullptr);

// The name -> shape table of the tensors in `weights`: a safetensors checkpoint or a GGUF file.
std::map<std::string, Shape> tensor_shapes(const std::string& weights);

}  // namespace fluxrt::io
