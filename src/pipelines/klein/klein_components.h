#pragma once
// The state behind Flux2KleinPipeline: where its three components come from (a diffusers folder
// or synthetic weights of a named variant), the defaults read from the folder, and the
// components themselves — resident after load(), or, with PipelineOptions::low_memory, created
// for each use and released right after it (ComponentLease, pipelines/component_loading.h).
#include <filesystem>
#include <memory>
#include <string>

#include "models/flux/flux2_config.h"
#include "models/flux/flux2_transformer.h"
#include "models/qwen3/qwen3_encoder.h"
#include "models/vae/flux2_vae.h"
#include "pipelines/component_loading.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "pipelines/latent_preview.h"
#include "pipelines/reference_latent_cache.h"
#include "pipelines/schedule.h"
#include "pipelines/step_graph.h"

namespace fluxrt::pipelines {

// Rough activation bytes of one generate call (worst case f32), used to refuse sizes that cannot
// fit in RAM before anything runs.
size_t estimate_generate_bytes(int width, int height, int batch, const models::Flux2Config& config,
                               int vae_scale_factor);
// validate_size against a given transformer's widths and VAE factor.
void validate_size_for(int width, int height, int batch, const models::Flux2Config& config,
                       int vae_scale_factor, const MemoryCheck& memory = {});

struct Flux2KleinPipeline::Impl {
  // Source: a diffusers pipeline folder, or (synthetic_variant non-empty) random weights.
  std::filesystem::path root;
  std::string synthetic_variant;
  std::filesystem::path tokenizer_dir;
  uint64_t synthetic_seed = 42;

  PipelineOptions options;
  KleinModelDefaults defaults;
  FlowMatchSchedulerConfig scheduler;
  models::Flux2Config transformer_config;
  models::Qwen3Config text_config;  // synthetic only (a folder's encoder reads its own config.json)
  models::Flux2VaeConfig vae_config;
  ResidentWeights weights;  // from the checkpoint headers (a folder's; synthetic: 0)
  ModelFacts facts;         // from the above (make_facts), what plan_request reads

  // Resident components (all null in low-memory mode).
  std::unique_ptr<models::Flux2Transformer> transformer;
  std::unique_ptr<models::KleinPromptEmbedder> embedder;
  std::unique_ptr<models::Flux2Vae> vae;
  // With PipelineOptions::cuda_graphs: the resident transformer's step graphs, kept across
  // requests (null in low-memory mode, where each request records its own).
  std::unique_ptr<StepGraphCache> step_graphs;
  // With options.text_encoder_apart(): the last request's prompt embeddings.
  KeptTextEncoding kept_text;
  // Encoded reference images by content, shared by the requests (behind a pointer: Impl moves).
  std::unique_ptr<ReferenceLatentCache> reference_latents = std::make_unique<ReferenceLatentCache>();
  // The preview colour map, fitted from every finished image (generate runs one call at a time).
  LatentPreviewer previewer;

  // Reads and checks the folder's layout and configs; loads no weights. NotFound / Format /
  // Unsupported naming the folder or file on problems.
  static Impl from_folder(const std::filesystem::path& model_root, const PipelineOptions& options);
  static Impl from_variant(const std::string& variant, const std::filesystem::path& tokenizer_dir,
                           const PipelineOptions& options, uint64_t seed);
  static void set_tiny_configs(Impl& m);
  // The facts the configs above give (Flux2KleinPipeline's describe).
  ModelFacts make_facts() const;

  // Loads the three components (concurrently with options.parallel_load).
  void load_resident();

  // Each records its load span in options.profiler.
  std::unique_ptr<models::Flux2Transformer> make_transformer() const;
  std::unique_ptr<models::KleinPromptEmbedder> make_embedder() const;
  std::unique_ptr<models::Flux2Vae> make_vae(bool with_encoder) const;

  ComponentLease<models::Flux2Transformer> transformer_lease();
  ComponentLease<models::KleinPromptEmbedder> embedder_lease();
  ComponentLease<models::Flux2Vae> vae_lease(bool with_encoder);
};

}  // namespace fluxrt::pipelines
