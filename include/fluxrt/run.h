#pragma once
// A run stated the way `fluxrt generate` states it: settings as flags give them, over a YAML run
// preset (configs/*.yaml, docs/cli.md), over the model's defaults; PNG files written into a
// folder under a file-name pattern, each with its settings as text chunks. resolve_run checks
// everything before any weight is loaded, so a bad input costs one line and writes nothing; the
// Engine then runs the request it made. Messages name the command's flags (--size, --batch, ...).
// A front end with its own request format (a server) uses Engine and GenerateRequest directly.
//
//   fluxrt::RunSettings settings;  settings.prompt = "a red circle";  settings.seed = 7;
//   fluxrt::Run run = fluxrt::resolve_run(settings);
//   fluxrt::Engine engine(run.model, run.engine);
//   fluxrt::GenerateResult result = engine.generate(run.request);
//   for (const std::string& path : fluxrt::write_run_images(run, result)) std::puts(path.c_str());
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fluxrt/engine.h"

namespace fluxrt {

// Every field optional: unset falls back to the preset, then to the model's default.
struct RunSettings {
  std::optional<std::string> model;       // folder, .safetensors file or hub repo id; else the bundled demo
  std::optional<std::string> components;  // with a .safetensors model: its pipeline folder
  std::optional<std::string> text_encoder;  // EngineOptions::text_encoder: a GGUF / .safetensors encoder

  // A preset name under configs/ (or $FLUXRT_CONFIG_DIR) or a .yaml file. Unset: default.yaml
  // when shipped, with demo.yaml over it when no model is named anywhere.
  std::optional<std::string> preset;
  std::optional<std::string> prompt;
  std::optional<std::string> prompts_file;  // one prompt per line, each a prompt of the batch
  std::optional<std::string> negative_prompt;
  std::vector<std::string> reference_images;  // PNG files
  std::optional<std::string> init_image;      // PNG file (FLUX.1 img2img)
  std::optional<std::string> size;            // "WxH"
  std::optional<int> steps;
  std::optional<float> guidance;
  std::optional<float> strength;
  std::optional<float> true_cfg;
  std::optional<uint64_t> seed;  // unset: the preset's, else random
  std::optional<int> images_per_prompt;
  std::optional<int> max_sequence_length;
  std::optional<std::string> dtype;       // "bf16" or "f32"
  std::optional<std::string> device;      // "cpu", "cuda", "cuda:N", "cpu:N"
  std::optional<std::string> vae_tiling;  // "auto", "on" or "off"
  std::optional<int> threads;
  std::optional<bool> low_memory;
  bool cuda_graphs = false;
  std::optional<std::string> out_dir;  // default: the preset's, else "outputs"
  // {seed} {index} {prompt_index} {image_index} {width} {height} {steps}; ".png" appended
  std::optional<std::string> filename_pattern;
  std::optional<std::string> profile;  // a JSON timing report file: checked here, written by the caller
  // --lora FILE[:STRENGTH], in order; given, they replace the preset's `loras:` list. Merged into
  // the transformer at load (EngineOptions::loras).
  std::vector<std::string> loras;
};

// A resolved, checked run.
struct Run {
  std::string model;        // as given, or the bundled demo model's folder
  std::string variant;      // "FLUX.2-klein-4B (distilled)", ...
  std::string preset;       // the preset file used; "" for none
  EngineOptions engine;     // low_memory decided (on when the components do not fit together)
  GenerateRequest request;  // images read; unset fields left to the model
  bool seed_was_random = false;
  std::string init_image;          // the init image's path, "" without img2img
  std::vector<std::string> notes;  // settings given without effect, modes chosen: for the user
  std::string out_dir;
  std::string filename_pattern;

  int images() const { return static_cast<int>(request.prompts.size()) * request.images_per_prompt; }
};

// Merges the settings over the preset, resolves the model, reads the prompts file, reference and
// init images, checks sizes (against the RAM, with the weights' sizes from the checkpoint
// headers), text, the output folder, the file-name pattern and the profile path. Loads no
// weights, writes nothing. Error with a one-line message on the first problem.
Run resolve_run(const RunSettings& settings);

// Writes every image of `result` as a PNG with its metadata_text into run.out_dir (created when
// missing), named by run.filename_pattern; a name already taken gets -1, -2, ... so nothing is
// ever overwritten. Returns the paths in request order. On failure the images written so far
// stay, the failing one leaves no file, and Error names it.
std::vector<std::string> write_run_images(const Run& run, const GenerateResult& result);

// Writes `contents` to `path` through a temporary file renamed over it (a --profile report), so a
// reader never sees a partial file. Error Io naming the path.
void write_text_file(const std::string& path, const std::string& contents);

}  // namespace fluxrt
