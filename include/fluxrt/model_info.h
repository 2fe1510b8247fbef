#pragma once
// What a model is and holds, from its configs and checkpoint headers only (no weights loaded):
// the data `fluxrt info` prints. Engine::info() gives the same for an open engine.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fluxrt {

// One component of a pipeline folder (or the single file / folder given).
struct ComponentInfo {
  std::string name;        // "transformer", "text_encoder", "vae", "tokenizer", ...
  std::string library;     // "diffusers", "transformers" or empty
  std::string class_name;  // from model_index.json / config.json; may be empty
  std::string folder;      // empty for a single file
  std::string weights;     // the file, index or folder the tensors came from; empty if none
  bool present = false;    // false: listed but missing (a partial download?)
  size_t files = 0;        // .safetensors files behind `weights`
  size_t tensors = 0;
  uint64_t parameters = 0;               // sum of element counts
  uint64_t bytes = 0;                    // sum of tensor data bytes
  std::map<std::string, size_t> dtypes;  // "bf16" -> tensor count
};

// The denoiser's hyper-parameters, from its config.json or its tensor shapes.
struct TransformerShape {
  int64_t hidden_size = 0;
  int64_t head_dim = 0;
  int64_t num_heads = 0;
  int64_t double_blocks = 0;
  int64_t single_blocks = 0;
  int64_t in_channels = 0;
  int64_t context_dim = 0;  // the text embedding width it takes
  bool guidance_embed = false;
};

struct ModelInfo {
  std::string spec;            // as given: a folder, a .safetensors file or "org/name[@rev]"
  std::string path;            // the local folder or file it resolved to
  std::string source;          // "diffusers-folder", "component-folder" or "single-file"
  std::string repo_id;         // set when found in the Hugging Face cache
  std::string revision;        // the snapshot (a commit hash) for cache hits
  std::string pipeline_class;  // model_index.json "_class_name", e.g. "Flux2KleinPipeline"
  // The diffusers pipelines the model runs as (its family's): "Flux2KleinPipeline",
  // "Flux2KleinInpaintPipeline" (a request with a mask); empty when the family is unknown.
  std::vector<std::string> pipelines;

  std::string description;  // one line for people: "FLUX.2-klein-4B (distilled)"
  std::string family;       // "flux.1", "flux.2" or "unknown"
  std::string variant;      // "flux.1-dev", "flux.2-klein-4b", "custom", ...
  std::string layout;       // transformer tensor names: "diffusers", "bfl" or "unknown"
  std::string key_prefix;   // stripped from every tensor name (ComfyUI files), or empty

  std::optional<bool> distilled;          // klein: distilled or base; unset when it cannot be told
  std::string distilled_from;             // what told it: "model_index.json", "file name" or empty
  std::optional<TransformerShape> shape;  // set when the family is known

  std::vector<ComponentInfo> components;
};

// Resolves `model` (a diffusers folder, a .safetensors file or a hub repo id in the local cache:
// $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub), detects the variant and opens every
// component's checkpoint headers, so a corrupt file fails here. Error NotFound / Format naming it.
ModelInfo inspect_model(const std::string& model);

// The info as a JSON document (what `fluxrt info --json` prints).
std::string model_info_json(const ModelInfo& info);

}  // namespace fluxrt
