#pragma once
// fluxrt::Engine: a FLUX model loaded once and kept resident, turning requests into images.
// Everything a front end (the `fluxrt` command, a server, a binding) needs is in plain standard
// types; no tensor, device or pipeline type crosses this header.
//
//   fluxrt::Engine engine("models/demo");                  // or a hub repo id, or a .safetensors
//   fluxrt::GenerateRequest request;
//   request.prompts = {"a red circle on a blue background"};
//   request.seed = 7;
//   fluxrt::GenerateResult result = engine.generate(request);
//   fluxrt::write_png("out.png", result.images[0].image, fluxrt::metadata_text(result.images[0].metadata));
//
// Errors are fluxrt::Error (fluxrt/error.h) with a code and a one-line message, from the
// constructor (model not found, corrupt, unsupported) and from generate (bad request, out of
// memory, cancelled).
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fluxrt/error.h"
#include "fluxrt/image.h"
#include "fluxrt/model_info.h"
#include "fluxrt/request.h"
#include "fluxrt/timing.h"
#include "fluxrt/version.h"

namespace fluxrt {

struct Run;  // fluxrt/run.h

// The dtype of the weights as used, the activations and the latents. BF16 is the checkpoints' own
// (zero-copy on the CPU); F32 converts at load and is slower, closest to an f32 reference.
// Int8 (CPU only, `--dtype int8`) is BF16 except in the transformer's linears, which run W8A8:
// their weights requantized at load to int8 per output row (127 levels where the CPU has int8
// units, AVX512-VNNI / AVX-VNNI / AMX; 63 on AVX2-only CPUs, whose int8 GEMM would saturate
// otherwise), the activations quantized per token to int8 at each call, int32 accumulation.
// Everything else (the activations between layers, attention, norms, the text encoders, the VAE)
// is bf16. About half the transformer's weight memory, faster where the CPU has int8 units, close
// to but not the bf16 image (docs/quantization.md has the measured quality); GGUF Q8_0 and fp8
// weights are requantized too, the 2-6 bit types stay as they are. Opening an Engine at Int8 on a
// CUDA device throws Unsupported.
enum class Precision { BF16, F32, Int8 };
// Every precision, in the order their names are listed (`--dtype`'s choices).
inline constexpr Precision kPrecisions[] = {Precision::BF16, Precision::F32, Precision::Int8};

// "bf16", "f32" or "int8": a precision's name where it is text (`--dtype`, presets, the image
// metadata, the server's model object, Python's `precision`).
const char* precision_name(Precision precision);
// The precision a name above names; InvalidArgument ("<what> 'x' must be bf16, f32 or int8")
// for anything else.
Precision parse_precision(const std::string& name, const std::string& what = "dtype");

// VAE decode/encode in tiles: Auto tiles when the whole image would not fit in memory.
enum class VaeTiling { Auto, On, Off };

struct EngineOptions {
  // "cpu", "cuda" / "cuda:N" (builds with CUDA), or "cpu:N" (N >= 1: the CPU posing as another
  // device, to check that every tensor is placed; docs/cuda.md).
  std::string device = "cpu";
  Precision precision = Precision::BF16;
  // Worker threads (OpenMP and oneDNN), 0 = all cores. One setting per process: an Engine opened
  // with it set changes it for every Engine. Unset: left as it is.
  std::optional<int> threads;
  // Keep one large component resident at a time (the text encoder, then the transformer, then
  // the VAE, each loaded per request): a much smaller peak, slower requests. Unset: chosen at
  // open, on when the components do not fit in RAM together at the model's default size.
  std::optional<bool> low_memory;
  // Never hold the text encoder(s) and the transformer in memory together: nothing loads at open;
  // each request loads the text encoder, encodes its prompts and frees it, then loads the
  // transformer and the VAE, which stay (a later request frees the transformer before its
  // encoding and loads it again after). The peak is the larger of the two rather than their sum
  // (klein-4B: the transformer's 7.2 GiB instead of 13 GiB with Qwen3) and the denoising loop is
  // the same; what a process that runs one request (`fluxrt generate`) gives up is only the
  // overlap of the two loads. A server, which encodes every request, keeps both (false).
  // No effect in low-memory mode, which frees every component after its stage.
  bool free_text_encoder = false;
  VaeTiling vae_tiling = VaeTiling::Auto;
  // Load the VAE encoder, which reference images and img2img need; false saves its weights and
  // load time, and a request that needs it fails with InvalidArgument.
  bool vae_encoder = true;
  // On cuda:N (and cpu:N): record the transformer calls of a denoising step once and replay them
  // as a graph for the later steps. No effect on plain "cpu".
  bool cuda_graphs = false;
  // With a single transformer .safetensors as the model: the diffusers pipeline folder or hub
  // repo id giving the text encoder(s), tokenizer(s), VAE and scheduler. Unset: the folder
  // holding the file (or the one above it) when it has a model_index.json.
  std::optional<std::string> components;
  // A single text-encoder file used instead of the folder's large encoder: klein's Qwen3 or
  // FLUX.1's T5-XXL (CLIP still comes from the folder), as a GGUF in llama.cpp's tensor names
  // (unsloth's Qwen3 GGUFs, city96's t5-v1_1-xxl encoder GGUFs; weights kept quantized) or a
  // .safetensors in transformers' names (ComfyUI's qwen_3_4b / t5xxl_fp16 files). The tokenizer
  // comes from the folder. A file of the wrong model or width fails the constructor.
  std::optional<std::string> text_encoder;
  // LoRAs merged into the transformer's weights at load (W + s B A in f32, rounded once), for
  // every request. A file that does not fit the model fails the constructor.
  std::vector<Lora> loras;
};

// After each denoising step, on the thread running generate.
struct Progress {
  int step = 0;   // 1-based
  int total = 0;  // steps that run (with img2img fewer than the schedule's)
  double step_seconds = 0;
  // The schedule's timestep this step ran at, as diffusers hands its step callback: sigma x 1000
  // (from near 1000 down towards 0).
  float timestep = 0;
  double elapsed_seconds = 0;  // denoising so far
  double eta_seconds = 0;      // the rest of the loop at the mean step time so far
  // Only after the steps Callbacks::preview_steps names: a rough picture of where each image of
  // the call is heading, in result order (generate_batch: every request's images in turn), at the
  // output size. Cheap — the step's predicted clean latents mapped to colour per latent token by a
  // fit the engine makes from the images it has finished, no VAE decode — and so empty until this
  // engine has finished one image.
  std::vector<Image> previews;
};

// Stops a generate call between steps: it then throws Error(Cancelled) and returns no image.
// Copies share one flag, so the thread that wants to stop keeps a copy; cancel() is a single
// lock-free store, safe in a signal handler. A token stays cancelled.
class CancelToken {
 public:
  CancelToken() : state_(std::make_shared<std::atomic<bool>>(false)), flag_(state_.get()) {}
  void cancel() noexcept { flag_->store(true, std::memory_order_relaxed); }
  bool cancelled() const noexcept { return flag_->load(std::memory_order_relaxed); }
  // The flag itself, for code that polls it as an atomic (the pipelines do, between steps).
  const std::atomic<bool>* flag() const noexcept { return flag_; }

  static_assert(std::atomic<bool>::is_always_lock_free, "cancel() must be safe in a signal handler");

 private:
  std::shared_ptr<std::atomic<bool>> state_;
  std::atomic<bool>* flag_;  // state_.get(), read without touching the shared_ptr
};

struct Callbacks {
  std::function<void(const Progress&)> on_progress;  // may be empty
  CancelToken cancel;
  std::vector<int> preview_steps;  // 1-based steps whose Progress carries previews
};

// What the engine knows about one generated image: the settings that made it, so it can be
// reproduced (the `fluxrt generate` PNGs carry them as text chunks: metadata_text).
struct ImageMetadata {
  std::string prompt;
  std::string negative_prompt;
  uint64_t seed = 0;
  int index = 0;            // in the request's image order
  int count = 0;            // images in the request
  int prompt_index = 0;     // index / images_per_prompt
  int image_index = 0;      // index % images_per_prompt
  int steps = 0;            // denoising steps that ran
  int scheduled_steps = 0;  // the schedule's length (img2img runs only its tail)
  float guidance = 0;
  int width = 0, height = 0;
  std::optional<int> max_sequence_length;  // the text length used; unset: "default"

  std::string model;                          // as given to the Engine
  std::string variant;                        // "FLUX.2-klein-4B (distilled)", ...
  std::string dtype;                          // "bf16", "f32" or "int8" (the engine's precision)
  std::string version;                        // of the library that made it
  std::vector<std::string> reference_images;  // the request's names for them
  bool img2img = false;
  std::string init_image;         // img2img: the request's name for it
  std::optional<float> strength;  // img2img: the strength used
  std::optional<std::string> mask;       // inpainting: the request's name for its mask
  std::optional<int> padding_mask_crop;  // inpainting on a window around the mask
  std::optional<float> true_cfg;  // set only when true CFG ran
  struct LoraUsed {
    std::string name;  // the file name (no folders)
    float strength = 1;
    std::string sha256;  // the file's SHA-256, 64 hex digits
  };
  std::vector<LoraUsed> loras;  // the Engine's, then the request's
  // With a step cache (GenerateRequest::cache): its settings as the `cache` field's text, and one
  // character per step that ran: F the whole transformer, C the cache reused, P the CFG branches
  // differed (First-Block Cache).
  std::string cache;
  std::string cache_steps;
};

// The metadata as PNG text chunks: prompt, negative_prompt, seed, batch_index ("i of n"), steps,
// guidance, size, max_sequence_length, model, variant, dtype, fluxrt_version; then, only when
// used, reference_images (names joined by ", "), init_image, mask, strength and scheduled_steps, and
// true_cfg; and `loras`: one "name:strength:hash" per LoRA (hash: the first 12 hex digits of
// its SHA-256, as A1111 / ComfyUI record it), joined by ", ".
TextChunks metadata_text(const ImageMetadata& metadata);

struct GeneratedImage {
  Image image;  // RGB 8-bit, width x height
  ImageMetadata metadata;
};

struct GenerateResult {
  std::vector<GeneratedImage> images;  // in request order
  int width = 0, height = 0;
  int steps = 0;  // denoising steps that ran
  float guidance = 0;
  bool used_cfg = false;  // two forwards per step (klein base with guidance > 1, FLUX.1 true CFG)
  int graph_steps = 0;    // steps that replayed a recorded graph (EngineOptions::cuda_graphs)
  // With a step cache: ImageMetadata::cache_steps; MagCache with calibrate: the ratio per step
  // (the conditional branch's), for MagCacheConfig::mag_ratios.
  std::string cache_steps;
  std::vector<float> mag_ratios;
  // Settings of the request that changed nothing for this model (RequestPlan::notes).
  std::vector<std::string> notes;
  // This call: run timings, the engine's load as cold_load, total_s the call's wall time.
  TimingReport timing;
};

class Engine {
 public:
  // Resolves `model` (a diffusers pipeline folder, a single transformer .safetensors with
  // options.components, or a hub repo id "org/name[@rev]" in the local Hugging Face cache),
  // checks that it is a FLUX.2 klein or FLUX.1 pipeline, and loads it (its components in
  // parallel; in low-memory mode nothing is loaded until a request). Error NotFound / Format /
  // Unsupported / InvalidArgument / OutOfMemory naming what is wrong.
  explicit Engine(const std::string& model, const EngineOptions& options = {});
  // The model and options of a resolved run (fluxrt/run.h), which has resolved the model already:
  // it is not resolved again.
  explicit Engine(const Run& run);
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  // Generates the request's images. Thread-safe: calls from several threads run one at a time
  // (a mutex, which promises no order; a Scheduler (fluxrt/scheduler.h) in front of the engine
  // runs concurrent requests as batches instead), each with its own callbacks and result. The
  // cancel token is checked before the text encoding, between denoising steps and before the VAE
  // decode: a cancelled call throws Error(Cancelled).
  GenerateResult generate(const GenerateRequest& request, const Callbacks& callbacks = {});

  // Several requests as one batch: one text encoding and one denoising loop for all their
  // images, which is faster per image than one call each. results[i] belongs to requests[i] and
  // holds the images generate(requests[i]) gives alone: each request's noise comes from its own
  // seed, its metadata and indices are its own (the timing is the batch's). Every request needs
  // the same non-empty batch_key, else InvalidArgument; an invalid request fails the whole batch,
  // so check requests before batching them. One request is the same as generate.
  std::vector<GenerateResult> generate_batch(const std::vector<GenerateRequest>& requests,
                                             const Callbacks& callbacks = {});
  // What must agree for requests to share a batch, as a string: the plan's size, steps, guidance,
  // CFG, text length, the negative prompt CFG uses, and of the request's LoRAs only whether it has
  // any when they are all plain low-rank LoRAs of the transformer (each request's then apply to its
  // own images only), else the list itself (LoKr, LoHa, DoRA, text-encoder modules). "" for a request that
  // cannot join a batch (reference images, an init image). Throws as plan does for a request the
  // model refuses.
  std::string batch_key(const GenerateRequest& request) const;

  // The request's unset fields as generate resolves them and its values checked against limits()
  // and the memory, without running anything (to show or check before queueing): the one plan
  // generate runs. InvalidArgument (Error::field() naming the field) or OutOfMemory when generate
  // would refuse the request.
  RequestPlan plan(const GenerateRequest& request) const;

  ModelDefaults defaults() const;
  // What a request may ask of this model (the bounds plan checks, the inputs its family takes).
  RequestLimits limits() const;
  // The model as given to the constructor, and its variant in words.
  const std::string& model() const;
  const std::string& variant() const;
  // `fluxrt info`'s data for the model (read from its headers on the first call).
  ModelInfo info() const;
  // The load done by the constructor; unset in low-memory mode (loads happen per request and
  // are in each result's timing.run.load_s).
  std::optional<LoadTimings> load_timings() const;
  // The options as used: low_memory decided, the device as the library spells it ("gpu" and
  // "cuda:0" -> "cuda").
  const EngineOptions& options() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fluxrt
