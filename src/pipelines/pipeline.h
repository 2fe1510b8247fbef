#pragma once
// One interface over the pipeline families and the registry that maps a diffusers pipeline class
// (model_index.json's _class_name) or a transformer checkpoint (pipelines/variant.h) to one, so
// that no code above compares class names: runtime::Engine holds a Pipeline, asks its kind what a
// request may carry, and loads through the kind's factory.
//
//   const PipelineKind* kind = find_pipeline_kind(model.pipeline_class);   // null: not ours
//   std::unique_ptr<Pipeline> pipe = kind->load(model_root, options);
//   GenerateResult out = pipe->generate(request);
//
// The request, result and options types every pipeline takes are here too. Fields a family cannot
// honour (FLUX.1's init image and true CFG on klein, reference images on FLUX.1) are refused by
// that family's generate with a one-line InvalidArgument, never dropped.
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
  // Load the three components concurrently (each on its own thread).
  bool parallel_load = true;
  // Keep at most one large component resident: the text encoder is loaded, used and freed before
  // the transformer is loaded; the VAE is loaded after the denoising loop. Slower (nothing
  // overlaps, weights are re-mapped per request), much smaller peak.
  bool low_memory = false;
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
};

// Called after each denoising step (step is 1-based) with the wall time of that step and the
// schedule's timestep it ran at (diffusers' t: sigma x num_train_timesteps).
using StepCallback = std::function<void(int step, int num_steps, double step_seconds, float timestep)>;

struct GenerateRequest {
  // One image per (prompt, repetition): prompts[p] repeated images_per_prompt times, in order,
  // exactly like diffusers' prompt list + num_images_per_prompt. An empty prompt is allowed.
  std::vector<std::string> prompts{""};
  std::string negative_prompt;  // base variants only (CFG); "" is diffusers' default negative
  int images_per_prompt = 1;
  std::optional<int> width, height;  // default: first reference image's size, else the model's
  std::optional<int> num_steps;
  std::optional<float> guidance_scale;
  std::optional<int> max_sequence_length;  // 512 (default) or 256 etc.
  uint64_t seed = 0;
  // Reference images (RGB or RGBA 8-bit), preprocessed as Flux2ImageProcessor does.
  std::vector<io::Image> reference_images;
  // Optional: replace the noise draw (tests / custom noise); shape [B, 128, H/(2f), W/(2f)]
  // (FLUX.1: [B, 16, H/f, W/f]), f the VAE's vae_scale_factor (8 for the released models).
  std::optional<Tensor> initial_latents;
  // FLUX.1 only (FluxPipeline / FluxImg2ImgPipeline): true classifier-free guidance with
  // negative_prompt when > 1 (diffusers' default 1: off); img2img from an RGB 8-bit init image
  // with strength in [0, 1] (diffusers' default 0.6). The klein pipeline refuses them
  // (InvalidArgument naming the field), FLUX.1 refuses reference_images and strength without
  // init_image: a field a pipeline cannot honour is an error, never silently dropped.
  std::optional<float> true_cfg_scale;
  std::optional<io::Image> init_image;
  std::optional<float> strength;
  // LoRAs for this request only: attached to the transformer's linears unmerged (low-rank side
  // branches) for the denoising loop and detached after it. Such a request runs its steps eagerly
  // (no step-graph replay: a kept graph holds no branches).
  std::vector<models::LoraSpec> loras;
  // Several requests as one batch (runtime::Engine::generate_batch; pipelines/batch.h).
  // prompt_repeats[p]: the images of prompts[p] (empty: images_per_prompt each). noise_groups:
  // runs of consecutive images whose noise one generator seeded with the group's seed draws, as
  // that request alone would (empty: one generator with `seed` for the whole batch). Text to
  // image only: FLUX.1 img2img refuses noise groups.
  std::vector<int> prompt_repeats;
  struct NoiseGroup {
    uint64_t seed = 0;
    int64_t images = 0;
  };
  std::vector<NoiseGroup> noise_groups;
  StepCallback on_step;
  const std::atomic<bool>* cancel = nullptr;  // checked between steps; throws Error(Cancelled)
  // Previews (pipelines/latent_preview.h): after each step named in preview_steps (1-based, of
  // the steps that run), on_preview gets one rough RGB image per image of the batch, before
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
  Schedule schedule;
  Tensor final_latents;  // [B, 128, H/(2f), W/(2f)] before decoding (model dtype)
};

// A request's unset fields as a family fills them in, in one shape for every family.
struct RequestDefaults {
  int num_steps = 0;
  float guidance_scale = 0;
  int width = 0, height = 0;
  int max_sequence_length = 0;
  std::optional<float> img2img_guidance_scale;  // families with img2img only
  std::optional<float> img2img_strength;
  // Where the model's sources disagreed and which one was taken (VariantInfo::notes): a front end
  // shows them with its run.
  std::vector<std::string> notes;
};

struct PipelineKind;

class Pipeline {
 public:
  virtual ~Pipeline() = default;
  virtual const PipelineKind& kind() const = 0;
  virtual GenerateResult generate(const GenerateRequest& request) = 0;
  virtual RequestDefaults request_defaults() const = 0;
  virtual const PipelineOptions& options() const = 0;
  // diffusers' vae_scale_factor, 2 ** (levels - 1) of the folder's VAE; sizes are multiples of
  // twice this.
  virtual int vae_scale_factor() const = 0;
  // The weights this pipeline keeps resident (from the checkpoint headers; 0 for synthetic ones).
  virtual const ResidentWeights& resident_weights() const = 0;
};

enum class PipelineFamily { Flux2Klein, Flux1 };

// A pipeline family as the registry knows it: how to recognise its folders and checkpoints, what
// its requests may carry, and how to load it.
struct PipelineKind {
  PipelineFamily family = PipelineFamily::Flux2Klein;
  const char* name = "";                   // "FLUX.2 klein", "FLUX.1"
  const char* pipeline_class = "";         // the diffusers class its folders name: "Flux2KleinPipeline", ...
  std::vector<std::string> other_classes;  // further classes with the same folder layout
  std::vector<std::string> weight_components;  // the components whose weights a folder must have
  // The folder component PipelineOptions::text_encoder_file replaces ("text_encoder" for klein's
  // Qwen3, "text_encoder_2" for FLUX.1's T5: the large encoder).
  const char* text_encoder_component = "";
  bool reference_images = false;               // GenerateRequest::reference_images
  bool img2img = false;                        // GenerateRequest::init_image and strength
  bool true_cfg = false;                       // GenerateRequest::true_cfg_scale
  // How it recognises its transformers (pipelines/variant.h: detect_variant asks every kind).
  TransformerDetection detection;
  // How LoRA files name its transformer's layers: which files it takes, and where they apply.
  const models::LoraNameScheme* lora_scheme = nullptr;
  // Its own checks of a pipeline folder beyond the weight components (check_pipeline_folder),
  // before anything loads: NotFound naming what is missing. Null when its load checks the rest.
  void (*check_folder)(const io::ResolvedModel& model) = nullptr;
  // A diffusers folder of this kind (resolved by io::resolve_model), loaded with the options
  // (components resident unless options.low_memory).
  std::unique_ptr<Pipeline> (*load)(const std::filesystem::path& model_root,
                                    const PipelineOptions& options) = nullptr;
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
    return transformer.runs && transformer.kind == this;
  }
};

// Every family, klein first.
const std::vector<const PipelineKind*>& pipeline_kinds();
const PipelineKind& flux2_klein_kind();
const PipelineKind& flux1_kind();
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
