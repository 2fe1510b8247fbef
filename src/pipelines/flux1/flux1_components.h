#pragma once
// The state behind Flux1Pipeline: the folder it reads, the defaults it found there, and the four
// components — resident after load(), or, with PipelineOptions::low_memory, created for each use
// and released right after it (ComponentLease from component_loading.h).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "models/clip/clip_text_model.h"
#include "models/flux/flux1_config.h"
#include "models/flux/flux1_transformer.h"
#include "models/t5/t5_encoder.h"
#include "models/vae/flux1_vae.h"
#include "pipelines/component_loading.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/latent_preview.h"
#include "pipelines/schedule.h"
#include "pipelines/step_graph.h"
#include "tokenizers/clip_tokenizer.h"

namespace fluxrt::pipelines {

// Both FLUX.1 text encoders with their tokenizers: what encode_prompt needs.
struct Flux1TextEncoders {
  std::unique_ptr<models::ClipTextModel> clip;
  std::unique_ptr<tokenizers::ClipTokenizer> clip_tokenizer;
  std::unique_ptr<models::T5PromptEmbedder> t5;

  // FluxPipeline._get_clip_prompt_embeds: ids padded/truncated to 77, pooled output [P, 768]; by
  // `with_loras` instead of `clip` when given (a request's CLIP LoRAs merged into a copy).
  Tensor pooled(const std::vector<std::string>& prompts,
                const models::ClipTextModel* with_loras = nullptr) const;
};

struct Flux1Pipeline::Impl {
  // Source: a diffusers pipeline folder, or (synthetic_variant non-empty) random weights.
  std::filesystem::path root;
  // FLUX.1 (FluxPipeline and the img2img / inpaint classes of the same folders), FLUX.1 Fill
  // (FluxFillPipeline: flux1_fill.h) or FLUX.1 Kontext (FluxKontextPipeline: flux1_kontext.h), as
  // the folder's model_index.json says.
  const PipelineKind* kind = &flux1_kind();
  std::string synthetic_variant;
  std::filesystem::path clip_tokenizer_dir, t5_tokenizer_dir;
  uint64_t synthetic_seed = 42;
  models::ClipTextConfig clip_config;  // synthetic only (a folder's encoders read their config.json)
  models::T5Config t5_config;
  PipelineOptions options;
  Flux1ModelDefaults defaults;
  FlowMatchSchedulerConfig scheduler;
  models::Flux1Config transformer_config;
  models::Flux1VaeConfig vae_config;
  ResidentWeights weights;  // from the checkpoint headers (a folder's; synthetic: 0)
  ModelFacts facts;         // from the above (make_facts), what plan_request reads

  // Resident components (all null in low-memory mode).
  std::unique_ptr<models::Flux1Transformer> transformer;
  std::unique_ptr<Flux1TextEncoders> text_encoders;
  std::unique_ptr<models::Flux1Vae> vae;
  // With PipelineOptions::cuda_graphs: the resident transformer's step graphs, kept across
  // requests (null in low-memory mode, where each request records its own).
  std::unique_ptr<StepGraphCache> step_graphs;
  // With options.text_encoder_apart(): the last request's prompt embeddings.
  KeptTextEncoding kept_text;
  // The preview colour map, fitted from every finished image (generate runs one call at a time).
  LatentPreviewer previewer;

  // Reads and checks the folder's layout and configs; loads no weights. NotFound / Format /
  // Unsupported naming the folder or file on problems.
  static Impl from_folder(const std::filesystem::path& model_root, const PipelineOptions& options);
  static Impl from_variant(const std::string& variant, const std::filesystem::path& clip_tokenizer_dir,
                           const std::filesystem::path& t5_tokenizer_dir, const PipelineOptions& options,
                           uint64_t seed);

  // The facts the configs above give (Flux1Pipeline's describe).
  ModelFacts make_facts() const;
  bool fill() const { return kind == &flux1_fill_kind(); }
  bool kontext() const { return kind == &flux1_kontext_kind(); }

  // Loads the components (each on its own thread with options.parallel_load).
  void load_resident();

  // Each records its load span in options.profiler.
  std::unique_ptr<models::Flux1Transformer> make_transformer() const;
  // Both encoders with `loras`' text-encoder parts merged.
  std::unique_ptr<Flux1TextEncoders> make_text_encoders(const std::vector<models::LoraSpec>& loras) const;
  // The CLIP text model with `loras`' CLIP parts merged (the engine's own LoRAs are not added).
  std::unique_ptr<models::ClipTextModel> make_clip(const std::vector<models::LoraSpec>& loras) const;
  // T5 with its tokenizer and `loras`' T5 parts merged (likewise).
  std::unique_ptr<models::T5PromptEmbedder> make_t5(const std::vector<models::LoraSpec>& loras) const;
  std::unique_ptr<models::Flux1Vae> make_vae(bool with_encoder) const;

  ComponentLease<models::Flux1Transformer> transformer_lease();
  // The resident encoders, or (low-memory mode) encoders made for this request with `loras`: the
  // engine's and the request's LoRAs, so a request's text-encoder LoRA costs no second copy there.
  ComponentLease<Flux1TextEncoders> text_encoders_lease(const std::vector<models::LoraSpec>& loras);
  ComponentLease<models::Flux1Vae> vae_lease(bool with_encoder);
};

}  // namespace fluxrt::pipelines
