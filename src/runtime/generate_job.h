#pragma once
// The glue between a generation request as a user states it (flags, a preset, a prompts file)
// and the pipeline: everything is resolved and validated up front -- model folder and tokenizer,
// reference images, size, output folder, file-name pattern -- so a bad input fails in one line
// before any model is loaded or any file is written. Then the PNG names and writing (never
// overwriting an existing file; the settings as text chunks come from the Engine's metadata).
// `fluxrt generate` reaches it through the public fluxrt::resolve_run (include/fluxrt/run.h); the
// model resolution and size checks here also serve runtime::Engine.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "fluxrt/engine.h"
#include "io/image.h"
#include "io/model_discovery.h"
#include "pipelines/flux2_klein_pipeline.h"
#include "pipelines/pipeline.h"
#include "runtime/run_config.h"

namespace fluxrt::runtime {

// Last-resort defaults, used when neither the flags nor the preset say (configs/default.yaml
// normally does).
inline constexpr const char* kDefaultOutDir = "outputs";
inline constexpr const char* kDefaultFilenamePattern = "fluxrt-{seed}-{index}.png";

// What the user asked for: the flags (as a RunConfig, source "") plus what only flags can say.
struct GenerateInputs {
  RunConfig flags;
  std::optional<std::string> preset;        // --config: a name under configs/ or a .yaml file
  std::optional<std::string> prompt;        // --prompt
  std::optional<std::string> prompts_file;  // --prompts-file
  std::vector<std::string> reference_paths; // --image
  // --components: with --model FILE (a single transformer checkpoint), the diffusers pipeline
  // folder or hub repo id that supplies the text encoder(s), tokenizer(s), VAE and scheduler.
  std::optional<std::string> components;
  // --text-encoder: a single file replacing the folder's klein Qwen3 / FLUX.1 T5
  // (PipelineOptions::text_encoder_file).
  std::optional<std::string> text_encoder;
  // The RAM the size check compares against; 0: the machine's physical RAM (tests set a small one).
  size_t ram_limit_bytes = 0;
};

// A fully resolved, validated job.
struct GenerateJob {
  // The diffusers pipeline folder the components come from (with --model FILE: --components or the
  // folder found next to the file; its own transformer/ is then not used).
  io::ResolvedModel model;
  std::string transformer_file;  // --model FILE: the transformer checkpoint (PipelineOptions::transformer_file)
  std::string text_encoder_file;  // --text-encoder FILE (PipelineOptions::text_encoder_file)
  std::string model_label;  // as given (path or repo id), or the bundled demo's path
  std::string variant;      // e.g. "FLUX.2-klein-4B (distilled)"
  std::string preset_file;  // the preset used, "" for none

  std::vector<std::string> prompts;
  std::string negative_prompt;
  int images_per_prompt = 1;
  std::optional<int> width, height;  // unset: the first reference image's, else the model's
  int vae_scale_factor = 8;          // the model's VAE (sizes are multiples of twice this)
  // Weights resident at once while generating (all components; --low-memory: the largest), from
  // the checkpoint headers; the size check adds them to the activations.
  size_t resident_weight_bytes = 0;
  std::optional<int> steps;
  std::optional<float> guidance;
  std::optional<int> max_sequence_length;
  uint64_t seed = 0;
  bool seed_was_random = false;
  std::vector<std::string> reference_paths;
  std::vector<io::Image> reference_images;  // RGB
  DType dtype = DType::BF16;
  Device device = Device::cpu();
  std::optional<int> threads;
  bool low_memory = false;
  std::string low_memory_note;  // set when low-memory mode was chosen because the components do not fit

  std::filesystem::path out_dir;
  std::string filename_pattern;
  // LoRA files (checked to exist) and strengths, merged into the transformer at load.
  std::vector<RunConfig::LoraEntry> loras;

  int total_images() const { return static_cast<int>(prompts.size()) * images_per_prompt; }
};

// Merges flags over the preset, resolves the model (flag, preset, else the bundled demo), reads the
// prompts file and reference images, checks sizes, text, output folder and file pattern. Loads no
// weights, writes nothing. Throws a one-line fluxrt::Error on the first problem.
GenerateJob resolve_generate_job(const GenerateInputs& inputs);

// A model as a pipeline folder to load: what the spec resolved to, the folder the components come
// from, and with a single-file spec the transformer checkpoint used instead of its transformer/.
struct ResolvedPipeline {
  io::ResolvedModel given;
  io::ResolvedModel model;
  std::string transformer_file;  // PipelineOptions::transformer_file; empty for a folder
  std::string text_encoder_file;  // PipelineOptions::text_encoder_file; empty for the folder's
  // The family that runs it (pipelines/pipeline.h), from the folder's pipeline class.
  const pipelines::PipelineKind* kind = nullptr;
};

// Resolves `spec` (io::resolve_model), finds the components folder of a single file
// (find_components_folder) and checks the folder (check_pipeline_folder). InvalidArgument
// for `components` with a folder; NotFound for a `text_encoder` that is not a file (the pipeline's
// load checks that it is the family's encoder).
ResolvedPipeline resolve_pipeline(const std::string& spec, const std::optional<std::string>& components,
                                  const std::optional<std::string>& text_encoder = std::nullopt);

// The variant in words ("FLUX.2-klein-4B (distilled)"), else the pipeline class: detection is
// informational here, the load validates for real.
std::string variant_label(const ResolvedPipeline& pipeline);

// The size a klein run takes from its first reference image (image_width x image_height) when
// none is given: the image's, shrunk to kReferenceTargetArea when larger and floored to multiples
// of 2 x the VAE factor, as the pipeline preprocesses it.
void reference_run_size(int image_width, int image_height, int vae_scale_factor, int* width, int* height);

// The pipeline's validate_size for `pipeline`'s family: InvalidArgument for a bad size or batch,
// OutOfMemory when it does not fit.
void check_run_size(const ResolvedPipeline& pipeline, int width, int height, int images, int vae_scale_factor,
                    const pipelines::MemoryCheck& memory);

// diffusers' vae_scale_factor of a resolved model, 2 ** (len(block_out_channels) - 1) from its
// vae/config.json, without loading weights; 8 (every released FLUX VAE) when there is no config.
// Format naming the file when it is unreadable.
int vae_scale_factor_of(const io::ResolvedModel& model);

// pipelines::check_pipeline_folder (the registry's generic checks, then the kind's own).
const pipelines::PipelineKind& check_pipeline_folder(const io::ResolvedModel& model,
                                                     bool transformer_from_file = false,
                                                     bool text_encoder_from_file = false);

// --model FILE: the pipeline folder that supplies the other components. `components` (a folder or
// hub repo id) when given; else the nearest folder with a model_index.json holding the file (the
// file's own folder, as in a hub repo whose root keeps the single file next to model_index.json,
// or the one above, for a file inside transformer/). NotFound saying to pass --components
// otherwise; the pipeline class must be the file's family (Unsupported naming both).
io::ResolvedModel find_components_folder(const io::ResolvedModel& transformer_file,
                                         const std::optional<std::string>& components);

// The bundled demo model (models/demo in the source tree, or <prefix>/share/fluxrt/models/demo) and
// a Qwen3 tokenizer folder for synthetic runs; NotFound saying where it looked.
std::filesystem::path find_bundled_demo_model();
std::filesystem::path find_bundled_qwen_tokenizer();

// One prompt per non-empty line (a trailing '\r' is dropped); InvalidArgument when none.
std::vector<std::string> read_prompts_file(const std::filesystem::path& file);

// The folder exists and is writable, or can be created under a writable ancestor; Io otherwise.
void check_output_dir_writable(const std::filesystem::path& dir);

// The pipeline request of a job (tests drive the pipelines with it; the CLI goes through Engine).
pipelines::GenerateRequest make_generate_request(const GenerateJob& job);

// File-name patterns: {seed}, {index} (image in the request, 0-based), {prompt_index},
// {image_index} (repetition of its prompt), {width}, {height}, {steps}. ".png" is appended when
// missing. InvalidArgument for an unknown placeholder, a '/' or an empty name.
struct OutputNameFields {
  uint64_t seed = 0;
  int index = 0, prompt_index = 0, image_index = 0;
  int width = 0, height = 0, steps = 0;
};
std::string format_output_name(const std::string& pattern, const OutputNameFields& fields);

// Creates `dir/name` exclusively (an empty placeholder), or `stem-1.png`, `stem-2.png`, ... when
// taken, so concurrent writers and earlier runs are never overwritten; returns the reserved path.
std::filesystem::path reserve_output_path(const std::filesystem::path& dir, const std::string& name);

// Reserves a name per image in `dir` (created when missing) from `pattern` with `run`'s seed, size
// and steps and each image's indices, and calls write(index, path) for it; a failed write removes
// its placeholder and rethrows. Returns the paths in order.
std::vector<std::filesystem::path> write_numbered_pngs(
    const std::filesystem::path& dir, const std::string& pattern, const OutputNameFields& run,
    int images_per_prompt, size_t count,
    const std::function<void(size_t index, const std::filesystem::path& path)>& write);

}  // namespace fluxrt::runtime
