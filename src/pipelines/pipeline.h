#pragma once
// One interface over the pipeline families and the registry that maps a diffusers pipeline class
// (model_index.json's _class_name) or a transformer checkpoint (pipelines/variant.h) to one, so
// that no code above compares class names: runtime::Engine holds a Pipeline, asks its kind what a
// request may carry, and loads through the kind's factory.
//
//   const PipelineKind* kind = find_pipeline_kind(model.pipeline_class);   // null: not ours
//   std::unique_ptr<Pipeline> pipe = kind->load(model_root, options);
//   GenerateResult out = pipe->generate(request);   // the public fluxrt::GenerateRequest
//
// A pipeline takes the public request itself with its plan (pipelines/request_plan.h: the one
// place that fills in defaults and checks a request against the model's limits), so a request
// field crosses no translation between the engine and the model. Fields a family cannot honour
// (FLUX.1's init image and true CFG on klein, reference images on FLUX.1) are refused there with a
// one-line InvalidArgument, never dropped.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "fluxrt/request.h"
#include "io/image.h"
#include "models/lora/lora_delta.h"
#include "models/vae/vae_tiling_plan.h"
#include "pipelines/memory_estimate.h"
#include "pipelines/schedule.h"
#include "pipelines/synthetic.h"
#include "pipelines/variant.h"

namespace fluxrt::pipelines {

struct PipelineOptions {
  DType dtype = DType::BF16;  // transformer, text encoder, VAE and latent dtype; F32 selectable
  Device device = Device::cpu();
  // The transformer's linears alone: Int8 runs them W8A8 (fluxrt::Precision::Int8, with dtype
  // bf16); the text encoders and the VAE stay in `dtype`.
  nn::LinearFormat transformer_linears = nn::LinearFormat::Native;
  // Load the three components concurrently (each on its own thread).
  bool parallel_load = true;
  // Keep at most one large component resident: the text encoder is loaded, used and freed before
  // the transformer is loaded; the VAE is loaded after the denoising loop. Slower (nothing
  // overlaps, weights are re-mapped per request), much smaller peak.
  bool low_memory = false;
  // Never hold the text encoder(s) and the transformer together: nothing loads at open; the text
  // encoder is loaded for a request's prompts and freed right after, then the transformer and the
  // VAE load and stay. A later request that needs the text encoder frees the transformer first and
  // loads it again after. The peak is the larger of the two, not their sum, with the same loop;
  // for a process that runs one request (`fluxrt generate`), whose only cost is that the two loads
  // no longer overlap. No effect with low_memory, which frees every component after its stage.
  bool free_text_encoder = false;
  bool load_vae_encoder = true;  // needed for reference images only
  // A single transformer checkpoint (.safetensors, or its .index.json; BFL, ComfyUI or diffusers
  // tensor names, as the transformer loaders read them) used instead of the folder's
  // transformer/. The folder then supplies only the text encoder(s), tokenizer(s), VAE and
  // scheduler (its transformer/ may be absent). The family must match the pipeline, and the
  // transformer's text width and latent channels the folder's (Unsupported otherwise).
  std::filesystem::path transformer_file;
  // A single text-encoder file used instead of the folder's PipelineKind::text_encoder_component
  // (klein's Qwen3 text_encoder/, FLUX.1's T5 text_encoder_2/): a GGUF in llama.cpp's names, its
  // weights kept quantized, or a .safetensors in transformers' names (Qwen3Encoder::load_file,
  // T5Encoder::load_file). The tokenizer still comes from the folder; the encoder's width must be
  // what the transformer reads (Unsupported otherwise, at load).
  std::filesystem::path text_encoder_file;
  models::TilingOptions vae_tiling;
  // Record the transformer call(s) of a denoising step (after one eager step) and replay them for
  // the later steps (ops::DeviceGraph: a CUDA graph on cuda:N; the host stand-in on cpu:N). The
  // resident transformer keeps the graphs of the last StepGraphCache::kCapacity request shapes
  // (batch, size, references, text length, CFG), so a later request of a kept shape replays every
  // step; in low-memory mode each request records its own. Ignored on plain cpu.
  // GenerateResult::graph_steps says how many steps replayed.
  bool cuda_graphs = false;
  // Synthetic pipelines only: the transformer's and the text encoder's linears (and the encoder's
  // embedding) in this quantized type, kept so (`fluxrt bench pipeline --weights q4_K`).
  std::optional<QuantType> synthetic_weights;
  // LoRAs merged into the transformer's weights at load (models/lora/lora_delta.h).
  std::vector<models::LoraSpec> loras;
  Profiler* profiler = nullptr;  // spans: pipelines/spans.h; may be null

  // Nothing is made at open, the requests make the components: all of them per stage in
  // low-memory mode; with free_text_encoder, the text encoder and then the others.
  bool components_made_by_requests() const { return low_memory || free_text_encoder; }
  // free_text_encoder in effect (low-memory mode overrides it): the text encoder freed after each
  // use and the last prompts' embeddings kept; the transformer and the VAE made at their first use
  // and kept, the transformer freed whenever the text encoder loads again.
  bool text_encoder_apart() const { return free_text_encoder && !low_memory; }

  // What a request's size check compares against with these components' weights resident as
  // this residency keeps them (RAM: the machine's).
  MemoryCheck memory_check(const ResidentWeights& weights) const {
    return MemoryCheck{weights.peak(low_memory, free_text_encoder), 0, !low_memory};
  }
};

// Called after each denoising step (step is 1-based) with the wall time of that step and the
// schedule's timestep it ran at (diffusers' t: sigma x num_train_timesteps).
using StepCallback = std::function<void(int step, int num_steps, double step_seconds, float timestep)>;

// One request of a pipeline call with its plan (plan_request): the pipelines read the request's
// inputs (prompts, images, LoRAs, seed) and take every setting from the plan, never from the
// request's unset fields. The requests of one call share everything Engine::batch_key compares.
struct PlannedRequest {
  const fluxrt::GenerateRequest* request = nullptr;
  fluxrt::RequestPlan plan;
};

// What a call carries besides its requests: hooks for the engine, and for tests a replacement of
// the noise.
struct CallContext {
  // Replaces the noise draw: shape [B, 128, H/(2f), W/(2f)] (FLUX.1: [B, 16, H/f, W/f]), f the
  // VAE's vae_scale_factor (8 for the released models), B the call's images.
  std::optional<Tensor> initial_latents;
  StepCallback on_step;
  const std::atomic<bool>* cancel = nullptr;  // checked between steps; throws Error(Cancelled)
  // Previews (pipelines/latent_preview.h): after each step named in preview_steps (1-based, of
  // the steps that run), on_preview gets one rough RGB image per image of the call, before
  // on_step; an empty list until the pipeline has finished an image to fit its colours from.
  std::vector<int> preview_steps;
  std::function<void(int step, std::vector<io::Image> previews)> on_preview;
};

struct GenerateResult {
  std::vector<io::Image> images;  // RGB, width x height, in request order
  int width = 0, height = 0, num_steps = 0;
  float guidance_scale = 0;
  bool used_cfg = false;
  int graph_steps = 0;  // denoising steps whose transformer calls ran as a replayed graph
  // With a step cache: one character per step that ran, 'F' the whole transformer ran, 'C' the
  // cache was reused, 'P' the CFG branches differed (pipelines/step_cache.h); and MagCache's
  // calibrated ratios.
  std::string cache_steps;
  std::vector<float> mag_ratios;
  // Reference images given (inpainting's source among them) and how many of them came encoded
  // from the pipeline's reference latent cache; klein-9B-KV: the bytes of the request's reference
  // keys and values (freed when the call returns).
  int reference_latents = 0;
  int reference_latents_kept = 0;
  // Tokens of those references as the transformer sees them (appended to every forward, or
  // klein-9B-KV's cached keys), per image: what a FLOP count adds for them.
  int64_t reference_tokens = 0;
  size_t reference_kv_bytes = 0;
  Schedule schedule;
  Tensor final_latents;  // [B, 128, H/(2f), W/(2f)] before decoding (model dtype)
};

// What a family reads from a model before loading any weight: enough to resolve and check a
// request (plan_request) and to size it against the memory.
struct ModelFacts {
  fluxrt::ModelDefaults defaults;
  fluxrt::RequestLimits limits;
  int vae_scale_factor = 8;        // diffusers' vae_scale_factor; sizes are multiples of twice this
  ResidentWeights weights;         // from the checkpoint headers (0 for synthetic pipelines)
  bool cfg = false;                // guidance > 1 runs classifier-free guidance (klein base)
  bool guidance_embedded = false;  // the guidance value goes into the transformer (FLUX.1 dev)
  // MagCache's magnitude ratios shipped for this model (FLUX.1 dev: diffusers' FLUX_MAG_RATIOS);
  // empty: a MagCache request must bring its own.
  std::vector<float> mag_ratios;
  // What the model's files said that a user should hear (two sources disagreeing, say).
  std::vector<std::string> notes;
};

struct PipelineKind;

class Pipeline {
 public:
  virtual ~Pipeline() = default;
  virtual const PipelineKind& kind() const = 0;
  virtual const ModelFacts& facts() const = 0;
  virtual const PipelineOptions& options() const = 0;
  // Runs one call: the batch's images in request order.
  virtual GenerateResult generate(const std::vector<PlannedRequest>& batch, const CallContext& call) = 0;

  // plan_request with this pipeline's facts and memory (its resident weights, the machine's RAM).
  fluxrt::RequestPlan plan(const fluxrt::GenerateRequest& request) const;
  // One request, planned here (tests and benchmarks; the engine plans before it calls).
  GenerateResult generate(const fluxrt::GenerateRequest& request, const CallContext& call = {});
};

// A pipeline family as the registry knows it: how to recognise its folders and checkpoints, what
// its requests may carry, and how to load it.
struct PipelineKind {
  const char* name = "";                   // "FLUX.2 klein", "FLUX.1", "FLUX.1 Fill"
  const char* pipeline_class = "";         // the diffusers class its folders name: "Flux2KleinPipeline", ...
  std::vector<std::string> other_classes;  // further classes with the same folder layout
  std::vector<std::string> weight_components;  // the components whose weights a folder must have
  // The folder component PipelineOptions::text_encoder_file replaces ("text_encoder" for klein's
  // Qwen3, "text_encoder_2" for FLUX.1's T5: the large encoder).
  const char* text_encoder_component = "";
  // How it recognises its transformers (pipelines/variant.h: detect_variant asks every kind).
  TransformerDetection detection;
  // The kind whose transformers its folders hold when they are not told apart by their own
  // (FLUX.1 Kontext's are FLUX.1's shapes): a single file of that kind runs with its folders. Null:
  // its own.
  const PipelineKind& (*transformers_of)() = nullptr;
  // How LoRA files name its transformer's layers: which files it takes, and where they apply.
  const models::LoraNameScheme* lora_scheme = nullptr;
  // Its own checks of a pipeline folder beyond the weight components (check_pipeline_folder),
  // before anything loads: NotFound naming what is missing. Null when its load checks the rest.
  void (*check_folder)(const io::ResolvedModel& model) = nullptr;
  // A diffusers folder of this kind (resolved by io::resolve_model), loaded with the options
  // (components resident unless options.low_memory).
  std::unique_ptr<Pipeline> (*load)(const std::filesystem::path& model_root,
                                    const PipelineOptions& options) = nullptr;
  // What a folder of this kind (resolved by io::resolve_model) says about the model before any
  // weight is loaded: its defaults, limits, VAE factor and weights (the same facts load gives).
  ModelFacts (*describe)(const std::filesystem::path& model_root, const PipelineOptions& options) = nullptr;
  // The family's part of plan_request (pipelines/request_plan.h), after the checks every family
  // shares: its defaults and its rules (which settings take effect, the notes when one does not).
  fluxrt::RequestPlan (*plan)(const fluxrt::GenerateRequest& request, const ModelFacts& facts) = nullptr;
  // The family's size check before anything is loaded (its validate_size).
  void (*validate_size)(int width, int height, int batch, int vae_scale_factor,
                        const MemoryCheck& memory) = nullptr;
  // `fluxrt bench pipeline --synthetic`: the variants it offers, and one of them made of random
  // weights (InvalidArgument for an option the family does not take).
  std::vector<std::string> bench_variants;
  SyntheticPipeline (*synthetic)(const SyntheticRequest& request) = nullptr;
  // `fluxrt quantize`: a checkpoint of its transformer (tensors as stored) in BFL's tensor names,
  // which the GGUF loaders in the wild expect.
  models::TensorStore (*bfl_checkpoint)(const models::TensorStore& raw) = nullptr;

  bool accepts_class(std::string_view class_name) const;
  // Whether a transformer checkpoint (detect_variant) runs here.
  bool takes_transformer(const VariantInfo& transformer) const {
    return transformer.runs && transformer.kind == (transformers_of ? &transformers_of() : this);
  }
};

// Every family, klein first.
const std::vector<const PipelineKind*>& pipeline_kinds();
const PipelineKind& flux2_klein_kind();
const PipelineKind& flux1_kind();
const PipelineKind& flux1_fill_kind();     // FLUX.1 Fill: its own transformer (masked-image channels)
const PipelineKind& flux1_kontext_kind();  // FLUX.1 Kontext: dev's transformer, an image to edit
// The kind whose folders name `pipeline_class`; null when none does.
const PipelineKind* find_pipeline_kind(std::string_view pipeline_class);
// Checks that `model` is a complete diffusers pipeline folder of a registered kind (its weight
// components present, then the kind's check_folder) and returns the kind; NotFound / Unsupported
// naming what is missing. With `transformer_from_file` its transformer/ is not needed, with
// `text_encoder_from_file` its text_encoder_component.
const PipelineKind& check_pipeline_folder(const io::ResolvedModel& model, bool transformer_from_file = false,
                                          bool text_encoder_from_file = false);
// The kind that runs a single transformer checkpoint of this family; null when none does.
const PipelineKind* pipeline_kind_for_transformer(const VariantInfo& transformer);
// "Flux2KleinPipeline (FLUX.2 klein) and FluxPipeline (FLUX.1)", for messages.
std::string supported_pipelines_text();
// The kinds a LoRA file can be applied to (its layers, lora_scheme.h), in registry order: every
// kind when it adapts only layers all have. Format error for a file that mixes two families' layers.
std::vector<const PipelineKind*> kinds_taking_lora(const models::LoraFile& lora);
// Which family a LoRA file is for, as `fluxrt info` says it: "FLUX.1", "FLUX.2", or
// "FLUX.1 or FLUX.2 (only shared layers)".
std::string lora_family_name(const models::LoraFile& lora);

}  // namespace fluxrt::pipelines
