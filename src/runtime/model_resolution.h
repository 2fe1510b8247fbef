#pragma once
// A model as a user names it (a diffusers folder, a single transformer checkpoint with the folder
// of its other components, a hub repo id in the local cache) -> the pipeline folder and files the
// family's PipelineKind loads. runtime::Engine resolves through here, and so does the settings
// resolver (frontend/), which hands its result to the Engine so a model is resolved once.
#include <filesystem>
#include <optional>
#include <string>

#include "io/model_discovery.h"
#include "pipelines/pipeline.h"

namespace fluxrt::runtime {

// A model as a pipeline folder to load: what the spec resolved to, the folder the components come
// from, and with a single-file spec the transformer checkpoint used instead of its transformer/.
struct ResolvedPipeline {
  io::ResolvedModel given;
  io::ResolvedModel model;
  std::string transformer_file;   // PipelineOptions::transformer_file; empty for a folder
  std::string text_encoder_file;  // PipelineOptions::text_encoder_file; empty for the folder's
  // The family that runs it (pipelines/pipeline.h), from the folder's pipeline class.
  const pipelines::PipelineKind* kind = nullptr;
};

// Resolves `spec` (io::resolve_model), finds the components folder of a single file
// (find_components_folder) and checks the folder (pipelines::check_pipeline_folder). InvalidArgument
// for `components` with a folder; NotFound for a `text_encoder` that is not a file (the pipeline's
// load checks that it is the family's encoder).
ResolvedPipeline resolve_pipeline(const std::string& spec, const std::optional<std::string>& components,
                                  const std::optional<std::string>& text_encoder = std::nullopt);

// The variant in words ("FLUX.2-klein-4B (distilled)"), else the pipeline class: detection is
// informational here, the load validates for real.
std::string variant_label(const ResolvedPipeline& pipeline);

// diffusers' vae_scale_factor of a resolved model, 2 ** (len(block_out_channels) - 1) from its
// vae/config.json, without loading weights; 8 (every released FLUX VAE) when there is no config.
// Format naming the file when it is unreadable.
int vae_scale_factor_of(const io::ResolvedModel& model);

// --model FILE: the pipeline folder that supplies the other components. `components` (a folder or
// hub repo id) when given; else the nearest folder with a model_index.json holding the file (the
// file's own folder, as in a hub repo whose root keeps the single file next to model_index.json,
// or the one above, for a file inside transformer/). NotFound saying to pass --components
// otherwise; the pipeline class must be the file's family (Unsupported naming both).
io::ResolvedModel find_components_folder(const io::ResolvedModel& transformer_file,
                                         const std::optional<std::string>& components);

// Folders shipped with fluxrt: the source tree (compile-time FLUXRT_SOURCE_DIR) and
// <exe>/../share/fluxrt of an install. Empty paths are skipped by callers.
std::filesystem::path source_tree_dir();
std::filesystem::path install_share_dir();

// The bundled demo model (models/demo in the source tree, or <prefix>/share/fluxrt/models/demo);
// NotFound saying where it looked.
std::filesystem::path find_bundled_demo_model();

}  // namespace fluxrt::runtime
