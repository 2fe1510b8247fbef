#pragma once
// The settings resolver every front end uses: what a user states (`fluxrt generate` or
// `fluxrt serve` flags, Python's from_pretrained keywords) over a YAML run preset (configs/*.yaml,
// docs/cli.md) over the model's defaults, resolved once into the engine options and the request:
// the preset merged once, the model resolved once (Engine(run) takes it as resolved), the images
// read, and the request planned against the model's limits, all before any weight is loaded, so
// a bad input costs one line and writes nothing. Then, for `fluxrt generate`, the PNG files
// written into a folder under a file-name pattern, each with its settings as text chunks.
//
//   fluxrt::RunSettings settings;
//   settings.prompt = "a red circle";
//   settings.fields = {{"seed", "7"}, {"steps", "4"}};   // by key, fluxrt/request_fields.h
//   fluxrt::Run run = fluxrt::resolve_run(settings);
//   fluxrt::Engine engine(run);
//   fluxrt::GenerateResult result = engine.generate(run.request);
//   for (const std::string& path : fluxrt::write_run_images(run, result)) std::puts(path.c_str());
//
// A value given as a flag is named by the flag (--size, --batch, ...), a preset's by file, line and
// key; what the model's plan refuses names the request field by its key (Error::field()).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fluxrt/engine.h"

namespace fluxrt {

class ResolvedModel;  // the model as resolved (opaque), handed from Run to Engine

// Every field optional: unset falls back to the preset, then to the model's default.
struct RunSettings {
  // The model and how to open it.
  std::optional<std::string>
      model;  // folder, .safetensors / .gguf file or hub repo id; else the bundled demo
  std::optional<std::string> components;    // with a single-file model: its pipeline folder
  std::optional<std::string> text_encoder;  // EngineOptions::text_encoder: a GGUF / .safetensors encoder
  // A preset name under configs/ (or $FLUXRT_CONFIG_DIR) or a .yaml file. Unset: default.yaml
  // when shipped, with demo.yaml over it when no model is named anywhere. "none": no preset.
  std::optional<std::string> preset;
  std::optional<std::string> dtype;       // "bf16", "f32" or "int8"
  std::optional<std::string> device;      // "cpu", "cuda", "cuda:N", "cpu:N"
  std::optional<std::string> vae_tiling;  // "auto", "on" or "off"
  std::optional<int> threads;
  std::optional<bool> low_memory;
  // EngineOptions::free_text_encoder, and the RAM check counts the text encoder apart from the
  // transformer: `fluxrt generate`, which runs one request, sets it.
  bool free_text_encoder = false;
  bool cuda_graphs = false;
  // Merged into the transformer at load (EngineOptions::loras); given, they replace the preset's
  // `loras:` list.
  std::optional<std::vector<Lora>> loras;

  // The request: its fields by key as text (fluxrt/request_fields.h: {"steps", "4"}, {"size",
  // "512x512"}, {"seed", "random"}), in order; a key given twice takes the last.
  std::vector<std::pair<std::string, std::string>> fields;
  std::optional<std::string> prompt;
  std::optional<std::string> prompts_file;    // one prompt per line, each a prompt of the batch
  std::vector<std::string> reference_images;  // image files (klein)
  std::optional<std::string> init_image;      // an image file (FLUX.1 img2img; the image inpainted)
  std::optional<std::string> mask;            // an image file: inpainting's mask (white = repaint)

  // Where `fluxrt generate` writes.
  std::optional<std::string> out_dir;  // default: the preset's, else "outputs"
  // {seed} {index} {prompt_index} {image_index} {width} {height} {steps}; ".png" appended
  std::optional<std::string> filename_pattern;
  std::optional<std::string> profile;  // a JSON timing report file: checked here, written by the caller

  // `fluxrt generate` writes images: the output folder and the file-name pattern are checked. A
  // front end that does not (a server, a binding) sets false.
  bool writes_images = true;
  // The RAM the size check compares against; 0: the machine's physical RAM (tests set a small one).
  size_t ram_limit_bytes = 0;
};

// A resolved, checked run.
struct Run {
  std::string model;        // as given, or the bundled demo model's folder
  std::string variant;      // "FLUX.2-klein-4B (distilled)", ...
  std::string preset;       // the preset file used; "" for none
  EngineOptions engine;     // low_memory decided (on when the components do not fit together)
  // The request the settings state, images read; its unset fields are the model's (a front end
  // with requests of its own, the server, takes it as the defaults its requests start from).
  GenerateRequest request;
  bool prompt_given = false;  // a prompt from the settings or the preset (`prompt` is "" otherwise)
  bool seed_was_random = false;
  RequestPlan plan;                // the request as the model will run it
  RequestLimits limits;            // the model's
  std::string init_image;          // the init image's path, "" without img2img
  std::vector<std::string> notes;  // settings given without effect, modes chosen: for the user
  std::string out_dir;
  std::string filename_pattern;
  std::shared_ptr<const ResolvedModel> resolved;  // for Engine(run)

  int images() const { return static_cast<int>(request.prompts.size()) * request.images_per_prompt; }
};

// Merges the settings over the preset, resolves the model, reads the prompts file, reference and
// init images, plans the request (sizes against the RAM, with the weights' sizes from the
// checkpoint headers; text; the model's limits), checks the output folder, the file-name pattern
// and the profile path. Loads no weights, writes nothing. Error with a one-line message on the
// first problem.
Run resolve_run(const RunSettings& settings);

// "FILE[:STRENGTH]" (`--lora`): the strength after the last ':' when that parses as a finite number
// (negative allowed), else the whole text is the file with strength 1. InvalidArgument for an
// empty file name.
Lora parse_lora_text(const std::string& text);

// Writes every image of `result` as a PNG with its metadata_text into run.out_dir (created when
// missing), named by run.filename_pattern; a name already taken gets -1, -2, ... so nothing is
// ever overwritten. Returns the paths in request order. On failure the images written so far
// stay, the failing one leaves no file, and Error names it.
std::vector<std::string> write_run_images(const Run& run, const GenerateResult& result);

// Writes `contents` to `path` through a temporary file renamed over it (a --profile report), so a
// reader never sees a partial file. Error Io naming the path.
void write_text_file(const std::string& path, const std::string& contents);

}  // namespace fluxrt
