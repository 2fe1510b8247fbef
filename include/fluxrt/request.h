#pragma once
// The one request every front end builds and every pipeline takes: the `fluxrt generate` flags
// and presets, the server's JSON and multipart bodies and Python's keyword arguments all become a
// GenerateRequest (through the field table of fluxrt/request_fields.h), and the engine hands it to
// the pipeline as it is, with the RequestPlan that says what its unset fields became. What a
// model allows is its RequestLimits, the same for every front end (Engine::limits).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fluxrt/image.h"

namespace fluxrt {

// A LoRA file (.safetensors in the diffusers/PEFT, kohya, BFL/ComfyUI, fal, musubi or XLabs key
// scheme: docs/lora.md) and its strength (1 = as trained; negative subtracts it).
struct Lora {
  std::string path;
  float strength = 1.0f;
};

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
  // FLUX.2 klein: images to edit or combine, encoded by the VAE and attended to.
  std::vector<Image> reference_images;
  // FLUX.1 img2img: start from this image (resized to the output size), noised by `strength` in
  // (0, 1] (unset: 0.6); about steps x strength steps run. With mask_image: the image being edited.
  std::optional<Image> init_image;
  std::optional<float> strength;
  // Inpainting (RequestLimits::mask): white repaints, black keeps init_image (luminance, binarised
  // at 0.5); the size of init_image. Unset strength: klein 0.8, FLUX.1 0.6 (as diffusers).
  std::optional<Image> mask_image;
  // What the metadata records for the images above (file names, say); may be left empty.
  std::vector<std::string> reference_image_names;
  std::string init_image_name, mask_image_name;
  // LoRAs for this request only, on top of the Engine's: applied unmerged (a low-rank branch next
  // to each touched projection) and removed after the request. Only requests with the same list
  // batch together (Engine::batch_key).
  std::vector<Lora> loras;
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
  int max_reference_images = 0;  // FLUX.2 klein: 4 (BFL's limit); 0: none
  bool init_image = false;       // img2img: init_image and strength (FLUX.1)
  bool mask = false;             // inpainting: mask_image with init_image (klein, FLUX.1)
  bool true_cfg = false;         // FLUX.1
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
  // Settings the request gives that change nothing for this model (a guidance on a distilled
  // model, a negative prompt without CFG), one sentence each, for the front end to show.
  std::vector<std::string> notes;
};

}  // namespace fluxrt
