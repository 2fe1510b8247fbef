#pragma once
// Variant detection: which family and variant a transformer checkpoint is, from its config.json
// or from its tensor names and shapes (headers only, no weights read). Each family's PipelineKind
// recognises its own transformers (its `detection`); detect_variant asks the registry's kinds in
// turn, so no code outside a family's own files knows what its checkpoints look like.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/model_discovery.h"
#include "models/flux/flux_checkpoint_shape.h"

namespace fluxrt::pipelines {

struct PipelineKind;

// Transformer hyper-parameters as read from config.json or inferred from tensor shapes.
struct TransformerShape {
  int64_t hidden_size = 0;
  int64_t head_dim = 0;
  int64_t num_heads = 0;
  int64_t double_blocks = 0;
  int64_t single_blocks = 0;
  int64_t in_channels = 0;
  int64_t context_dim = 0;  // joint_attention_dim / txt_in input width
  bool guidance_embed = false;
};

struct VariantInfo {
  // The family whose detection recognised the checkpoint (null: none did), and whether that
  // family runs it: FLUX.2 dev is recognised by klein's detection only to be refused by name.
  const PipelineKind* kind = nullptr;
  bool runs = false;
  std::string family;      // the kind's model_family ("flux.1", "flux.2"); empty when unknown
  std::string variant;     // "flux.1-dev", "flux.2-klein-4b", ... or "custom"; empty when unknown
  std::string layout;      // the tensor names: "diffusers" or "bfl"; empty when no weights were read
  std::string key_prefix;  // stripped from every tensor name ("model.diffusion_model." in ComfyUI files)
  TransformerShape shape;
  // klein only: distilled (4 steps, no CFG) or base (CFG). nullopt when it cannot be told: the
  // two share the architecture, only model_index.json "is_distilled" (or a file name) says.
  std::optional<bool> distilled;
  std::string distilled_from;  // "model_index.json", "file name" or empty
  // klein only: FLUX.2-klein-9B-KV, klein-9B's architecture distilled for reference K/V caching.
  // Nothing in the tensors tells: a folder's model_index.json (Flux2KleinKVPipeline), the
  // components folder's, or the file name ("...-kv...") does.
  bool reference_kv = false;
  std::string reference_kv_from;  // "model_index.json", "file name" or empty
  std::string description;        // one line for people: "FLUX.2-klein-4B (distilled)", ...
  // The diffusers pipeline classes it runs as, when not every class of its kind (name_variant).
  std::vector<std::string> pipelines;
  // What a run of it should show its user: where two sources disagreed and which one was taken.
  std::vector<std::string> notes;
};

// How a family recognises its transformers: a PipelineKind's `detection`.
struct TransformerDetection {
  const char* model_family = "";  // what `fluxrt info` calls the family: "flux.2"
  const char* config_class = "";  // the diffusers class its transformer/config.json names
  // From tensor names and shapes: the layout, key prefix and shape when the checkpoint is one of
  // this family's; false otherwise.
  bool (*read_shapes)(const std::map<std::string, Shape>& shapes, VariantInfo& v) = nullptr;
  // From a config.json of config_class (the class's own defaults for absent keys).
  TransformerShape (*read_config)(const std::filesystem::path& config_json) = nullptr;
  // Where kinds share a config_class (FLUX.1 and FLUX.1 Fill): whether a shape read from such a
  // config.json is this kind's. Null: every shape is.
  bool (*takes_shape)(const TransformerShape& shape) = nullptr;
  // What the file name of a single checkpoint says about `distilled` (nullopt: nothing). Null for
  // families without that choice.
  std::optional<bool> (*distilled_from_file_name)(const std::string& path) = nullptr;
  // Whether a folder's pipeline class or a single file's name says the reference K/V recipe
  // (VariantInfo::reference_kv). Null for families without it.
  bool (*reference_kv_from_class)(const std::string& pipeline_class) = nullptr;
  bool (*reference_kv_from_file_name)(const std::string& path) = nullptr;
  // Names what was recognised from its shape and `distilled`: variant, description, `runs`; drops
  // `distilled` where the variant has no such choice.
  void (*name_variant)(VariantInfo& v) = nullptr;
};

// What the FLUX kinds' detections share. The layout, key prefix and shape of a checkpoint whose
// header read_flux_checkpoint_shape recognised:
void take_flux_checkpoint_shape(const models::FluxCheckpointShape& shape, VariantInfo& v);
// A diffusers FluxTransformer2DModel or Flux2Transformer2DModel config.json (the two classes name
// their sizes alike), with the class's own defaults for the keys it leaves out.
TransformerShape read_flux_transformer_config(const std::filesystem::path& config_json,
                                              const TransformerShape& defaults);

// Detects the variant of a resolved model: from transformer/config.json when there is one (with
// the tensor layout read from the weights' headers), else from the tensor names and shapes.
// `components` is the pipeline folder a single transformer file runs with (--components): its
// model_index.json "is_distilled" is taken over what the file's name says, with a note when the
// two disagree.
VariantInfo detect_variant(const io::ResolvedModel& model, const io::ResolvedModel* components = nullptr);
// From tensor names and shapes only (what a GGUF file's header gives; shapes in PyTorch order).
VariantInfo detect_variant_from_shapes(const std::map<std::string, Shape>& shapes);

}  // namespace fluxrt::pipelines
