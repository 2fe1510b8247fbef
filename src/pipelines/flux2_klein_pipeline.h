#pragma once
// FLUX.2-klein text-to-image and reference-image editing, step for step what diffusers'
// Flux2KleinPipeline does (flux-reference.md section 5): Qwen3 prompt embeddings (the klein chat
// template, padded to max_sequence_length), noise drawn as torch.randn on a CPU generator in the
// prompt dtype [B, 128, H/(2f), W/(2f)] (f = the VAE's vae_scale_factor, 2 ** (levels - 1): 8 for
// the released klein VAE, so H/16), flattened to tokens with ids (0, i, j, 0), text ids
// (0, 0, 0, l), the empirical-mu schedule, the Euler update in f32 with latents in the model
// dtype, true classifier-free guidance (two forwards) for the base variants, reference images
// VAE-encoded and appended as extra tokens with ids (10 + 10 r, i, j, 0), then BN-denormalise,
// unpatchify, decode, and the 8-bit conversion of VaeImageProcessor.
//
//   auto pipe = Flux2KleinPipeline::load("models/demo", {});
//   GenerateRequest req; req.prompts = {"a red circle"}; req.seed = 7;
//   GenerateResult out = pipe->generate(req);   // out.images[i]: RGB 8-bit
//
// Timings go to the Profiler given in the options under the span names of pipelines/spans.h, so
// the CLI and the benchmarks build their reports from one source.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "io/image.h"
#include "models/flux/flux2_config.h"
#include "models/qwen3/qwen3_encoder.h"
#include "models/vae/flux2_vae.h"
#include "pipelines/memory_estimate.h"
#include "pipelines/schedule.h"

namespace fluxrt::models {
class Flux2Transformer;
}

namespace fluxrt::pipelines {

// Flux2KleinPipeline::synthetic variant with the shapes of tests/data/models/flux2-klein-tiny.
inline constexpr const char* kKleinTinySyntheticVariant = "flux.2-klein-tiny";

// What the model folder says about itself (model_index.json, scheduler config, transformer
// config): the defaults a request falls back to.
struct KleinModelDefaults {
  bool is_distilled = true;     // model_index.json "is_distilled"; base variants: false
  int num_steps = 4;            // distilled: 4; base: 50
  float guidance_scale = 1.0f;  // distilled: 1.0 (unused); base: 4.0
  int width = 1024;             // diffusers' default_sample_size 128 x vae_scale_factor
  int height = 1024;
  int max_sequence_length = 512;
};

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
  models::TilingOptions vae_tiling;
  // Record the transformer call(s) of a denoising step (after one eager step) and replay them for
  // the later steps (ops::DeviceGraph: a CUDA graph on cuda:N; the host stand-in on cpu:N). The
  // resident transformer keeps the graphs of the last StepGraphCache::kCapacity request shapes
  // (batch, size, references, text length, CFG), so a later request of a kept shape replays every
  // step; in low-memory mode each request records its own. Ignored on plain cpu.
  // GenerateResult::graph_steps says how many steps replayed.
  bool cuda_graphs = false;
  Profiler* profiler = nullptr;  // spans: pipelines/spans.h; may be null
};

// Called after each denoising step (step is 1-based) with the wall time of that step.
using StepCallback = std::function<void(int step, int num_steps, double step_seconds)>;

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

class Flux2KleinPipeline {
 public:
  // A diffusers Flux2KleinPipeline folder (model_index.json, transformer/, text_encoder/,
  // tokenizer/, vae/, scheduler/), given as a path already resolved by io::resolve_model.
  static std::unique_ptr<Flux2KleinPipeline> load(const std::filesystem::path& model_root,
                                                  const PipelineOptions& options);
  // Synthetic random weights of a variant's real shapes and no files (benchmarks): the real
  // tokenizer is still needed for the prompt path, so `tokenizer_dir` must hold the Qwen3
  // tokenizer (vocab.json + merges.txt or tokenizer.json). Variants: flux.2-klein-4b, -9b,
  // flux.2-klein-base-4b, -base-9b (CFG defaults), and kKleinTinySyntheticVariant (the tiny test
  // model's shapes, for fast smoke tests).
  static std::unique_ptr<Flux2KleinPipeline> synthetic(const std::string& variant,
                                                       const std::filesystem::path& tokenizer_dir,
                                                       const PipelineOptions& options, uint64_t seed = 42);
  ~Flux2KleinPipeline();

  GenerateResult generate(const GenerateRequest& request);

  const KleinModelDefaults& defaults() const;
  const models::Flux2Config& transformer_config() const;
  const PipelineOptions& options() const;
  // diffusers' vae_scale_factor: 2 ** (len(vae.config.block_out_channels) - 1), from the folder's
  // vae/config.json (8 for the released klein VAE; the demo model's 3-level VAE: 4). Sizes are
  // multiples of 2 x this; one latent token covers that many pixels per side.
  int vae_scale_factor() const;
  // Throws InvalidArgument (one line) when a size is not a positive multiple of 2 x
  // vae_scale_factor (at most io::kMaxImageSide) or the batch is < 1, OutOfMemory when the
  // estimated activations plus memory.weight_bytes (the weights resident at the same time) exceed
  // the RAM (memory.ram_bytes, default the machine's); used by the CLI before anything is loaded
  // or written (the factor then comes from the folder's vae/config.json, the weights from the
  // checkpoint headers: pipeline_weight_bytes).
  static void validate_size(int width, int height, int batch, int vae_scale_factor = 8,
                            const MemoryCheck& memory = {});
  // The weights this pipeline keeps resident (from the checkpoint headers; 0 for synthetic ones).
  const ResidentWeights& resident_weights() const;

  struct Impl;

 private:
  explicit Flux2KleinPipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Flux2ImageProcessor preprocessing of a reference image: RGB, resized (Lanczos) to an area of at
// most 1024^2 keeping the aspect ratio when larger, both sides floored to multiples of
// `multiple_of` (the pipeline's vae_scale_factor * 2: 16 for the released VAEs) and centre-cropped
// to that size, scaled to [-1, 1]. Returns [1, 3, h, w] f32.
Tensor preprocess_reference_image(const io::Image& image, int multiple_of = 16);

// Packed latents <-> tokens and the position ids the klein transformer receives.
Tensor pack_latents(const Tensor& latents);                            // [B,C,h,w] -> [B,h*w,C]
Tensor unpack_latents(const Tensor& tokens, int64_t h, int64_t w);     // [B,h*w,C] -> [B,C,h,w]
Tensor klein_image_ids(int64_t h, int64_t w, int64_t t_offset = 0);    // [h*w, 4] i64: (t, i, j, 0)
Tensor klein_text_ids(int64_t length);                                  // [L, 4] i64: (0, 0, 0, l)

}  // namespace fluxrt::pipelines
