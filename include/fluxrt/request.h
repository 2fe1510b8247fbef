#pragma once
// The one request every front end builds and every pipeline takes: the `fluxrt generate` flags
// and presets, the server's JSON and multipart bodies and Python's keyword arguments all become a
// GenerateRequest (through the field table of fluxrt/request_fields.h), and the engine hands it to
// the pipeline as it is, with the RequestPlan that says what its unset fields became. What a
// model allows is its RequestLimits, the same for every front end (Engine::limits).
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "fluxrt/image.h"

namespace fluxrt {

// A LoRA file (.safetensors in the diffusers/PEFT, kohya, BFL/ComfyUI, fal, musubi or XLabs key
// scheme: docs/lora.md) and its strength (1 = as trained; negative subtracts it).
struct Lora {
  std::string path;
  float strength = 1.0f;
};

// Step caching: transformer work skipped on steps whose output barely changes, each method as
// diffusers 0.42.1's hooks compute it (`transformer.enable_cache(...)`), with its config field
// names and defaults (docs/requests.md "cache"). The cache lives for one request, one state per
// CFG branch; the method's per-step decisions are in the result (GenerateResult::cache_steps).

// First-Block Cache: double block 0 always runs; when the relative L1 change of its image
// residual since the last full step is at most `threshold`, the other blocks are skipped and
// their residual from that step is added instead.
struct FirstBlockCacheConfig {
  float threshold = 0.05f;
};

// TaylorSeer: full steps every `cache_interval` steps (and every step before
// `disable_cache_before_step` and from `disable_cache_after_step`); on the others each attention
// module's outputs (use_lite_mode: the whole transformer output) are extrapolated by a Taylor
// series of order `max_order` from finite differences of the full steps, stored in
// `taylor_factors_dtype` ("bfloat16", "float16" or "float32").
struct TaylorSeerCacheConfig {
  int cache_interval = 5;
  int disable_cache_before_step = 3;
  std::optional<int> disable_cache_after_step;
  int max_order = 1;
  std::string taylor_factors_dtype = "bfloat16";
  bool use_lite_mode = false;
};

// MagCache: after the first retention_ratio of the steps, a step is skipped (the blocks' last
// residual reused) while the accumulated error of the magnitude ratios stays at most `threshold`
// for at most `max_skip_steps` steps in a row. `mag_ratios` (one per step, nearest-interpolated to
// num_inference_steps) are the model's: empty takes the ones shipped for the model (FLUX.1 dev,
// diffusers' FLUX_MAG_RATIOS), and a model without them is refused (`fluxrt calibrate-cache`
// makes them). `calibrate`: skip nothing, measure the ratios (GenerateResult::mag_ratios).
struct MagCacheConfig {
  float threshold = 0.06f;
  int max_skip_steps = 3;
  float retention_ratio = 0.2f;
  std::optional<int> num_inference_steps;  // unset: the denoising steps the request runs
  std::vector<float> mag_ratios;
  bool calibrate = false;
};

using CacheConfig = std::variant<FirstBlockCacheConfig, TaylorSeerCacheConfig, MagCacheConfig>;

struct GenerateRequest {
  // One image per (prompt, repetition): prompts[p] repeated images_per_prompt times, in order
  // (diffusers' prompt list + num_images_per_prompt). An empty prompt is allowed.
  std::vector<std::string> prompts{""};
  // For classifier-free guidance (klein base with guidance > 1; FLUX.1 with true_cfg > 1). Unset
  // is diffusers' None: klein base then guides against "", FLUX.1 runs no true CFG.
  std::optional<std::string> negative_prompt;
  int images_per_prompt = 1;
  // Unset: the first reference image's size, else the model's (ModelDefaults). Multiples of
  // RequestLimits::size_multiple.
  std::optional<int> width, height;
  std::optional<int> steps;       // denoising steps of the schedule; unset: the model's
  std::optional<float> guidance;  // guidance scale; unset: the model's (unused by distilled klein)
  // FLUX.1 only: true classifier-free guidance with negative_prompt when > 1 (two forwards per
  // step). A field the model family cannot honour is an InvalidArgument, never dropped.
  std::optional<float> true_cfg;
  uint64_t seed = 0;  // the noise, drawn as torch.randn would on a CPU generator with this seed
  std::optional<int> max_sequence_length;  // text tokens; unset: the model's (512; schnell 256)
  // FLUX.2 klein: images to edit or combine, encoded by the VAE and attended to; FLUX.1 Kontext:
  // the one image it edits.
  std::vector<Image> reference_images;
  // FLUX.1 img2img: start from this image (resized to the output size), noised by `strength` in
  // (0, 1] (unset: 0.6); about steps x strength steps run. With mask_image: the image being edited.
  std::optional<Image> init_image;
  std::optional<float> strength;
  // Inpainting (RequestLimits::mask): white repaints, black keeps init_image (luminance, binarised
  // at 0.5); the size of init_image. Unset strength: klein 0.8, FLUX.1 0.6, FLUX.1 Fill 1 (as
  // diffusers). FLUX.1 Fill needs it (RequestLimits::mask_required).
  std::optional<Image> mask_image;
  // Inpainting on a window around the mask (RequestLimits::padding_mask_crop; diffusers'
  // padding_mask_crop): the mask's bounding box padded by this many pixels and grown to the run's
  // aspect ratio is cut out of init_image and the mask and resized to the run's size; the result is
  // resized back into the window and blended over init_image by the mask, so the output has
  // init_image's size. Unset: the whole image is resized to the run's size.
  std::optional<int> padding_mask_crop;
  // What the metadata records for the images above (file names, say); may be left empty.
  std::vector<std::string> reference_image_names;
  std::string init_image_name, mask_image_name;
  // LoRAs for this request only, on top of the Engine's: applied unmerged (a low-rank branch next
  // to each touched projection) and removed after the request. Only requests with the same list
  // batch together (Engine::batch_key).
  std::vector<Lora> loras;
  // Step caching (above); unset: every step runs the whole transformer.
  std::optional<CacheConfig> cache;
  // FLUX.1 Kontext (RequestLimits::max_area): the output's area in pixels. The size (given or the
  // model's) is rescaled to it keeping its aspect ratio and floored to size multiples, as
  // diffusers' FluxKontextPipeline does; unset: the size as it is (diffusers with max_area = W x H).
  std::optional<int> max_area;
};

// The model's own defaults: what a request's unset fields become.
struct ModelDefaults {
  int steps = 0;
  float guidance = 0;
  int width = 0, height = 0;
  int max_sequence_length = 0;
  int size_multiple = 16;  // widths and heights are multiples of this (2 x the VAE's factor)

  std::optional<float> img2img_guidance;  // FLUX.1 img2img only
  std::optional<float> img2img_strength;  // FLUX.1 img2img only
};

// What a request may ask of a model: one set of bounds that the engine checks and every front end
// reports (the CLI's --help, the server's /v1/models and 400s, Python's errors). The defaults are
// the bounds that hold for every model (request_limits()); a loaded model's (Engine::limits) may be
// narrower and says which inputs its family takes.
struct RequestLimits {
  int max_steps = 1000;            // steps are in [1, max_steps]
  float max_guidance = 100;        // guidance and true_cfg are in [0, max_guidance]
  int max_sequence_length = 4096;  // text tokens in [1, this]; FLUX.1's T5: 512
  // Widths and heights: positive multiples of this (FLUX: 16, 2 x the VAE factor; the demo model:
  // 8) ... 1 before a model is known.
  int size_multiple = 1;
  int max_side = 16384;  // ... at most this
  int max_images_per_prompt = 256;
  int max_images = 1024;         // prompts x images_per_prompt of one request
  int max_prompt_chars = 32000;  // code points of a prompt or negative prompt
  // What the family takes besides a prompt (a field it cannot honour is refused, never dropped).
  int max_reference_images = 0;  // FLUX.2 klein: 4 (BFL's limit), FLUX.1 Kontext: 1; 0: none
  int min_reference_images = 0;  // FLUX.1 Kontext: 1 (the image it edits)
  bool init_image = false;       // img2img: init_image and strength (FLUX.1)
  bool mask = false;             // inpainting: mask_image with init_image (klein, FLUX.1)
  bool mask_required = false;    // FLUX.1 Fill: every request is an init_image with its mask
  // padding_mask_crop with a mask: klein and FLUX.1 inpainting (diffusers' FluxFillPipeline has
  // none).
  bool padding_mask_crop = false;
  bool true_cfg = false;  // FLUX.1
  bool max_area = false;  // FLUX.1 Kontext: the size rescaled to GenerateRequest::max_area
  // Step caching (GenerateRequest::cache): models of many steps; the few-step distilled ones
  // take a cache as a no-op with a note.
  bool step_cache = true;
};

// The bounds that hold for every model, for a front end that has not opened one yet.
RequestLimits request_limits();

// What generate makes of a request: its unset fields resolved by the model's defaults and rules,
// checked against its limits (Engine::plan; the pipelines run exactly this).
struct RequestPlan {
  int width = 0, height = 0;
  int steps = 0;       // the schedule's length
  int steps_run = 0;   // denoising steps that run (img2img: the schedule's tail)
  float guidance = 0;  // the value in effect (klein distilled and FLUX.1 schnell: recorded only)
  int max_sequence_length = 0;
  std::optional<float> strength;  // img2img
  // Two transformer calls per step: klein base CFG (guidance > 1) or FLUX.1 true CFG.
  bool cfg = false;
  std::optional<float> true_cfg;  // set when FLUX.1 true CFG runs
  std::string negative_prompt;    // the one CFG guides against ("" when none was given)
  int images = 0;
  // The step cache that runs, checked and completed (MagCache: num_inference_steps and the ratios
  // it uses); unset when none was asked for or the model takes none (then a note says so).
  std::optional<CacheConfig> cache;
  // Settings the request gives that change nothing for this model (a guidance on a distilled
  // model, a negative prompt without CFG), one sentence each, for the front end to show.
  std::vector<std::string> notes;
};

}  // namespace fluxrt
