#pragma once
// Run presets for `fluxrt generate` (docs/cli.md): small YAML files under configs/ that hold the
// defaults of a run (model, size, steps, guidance, seed, text length, dtype, output folder, file
// name pattern, prompts). Precedence, highest first: command-line flags, the preset, the model's
// own defaults (pipelines::KleinModelDefaults), the last-resort values in resolve_generate_job.
//
//   # configs/demo.yaml
//   size: 256x256
//   steps: 4
//   seed: 0            # or "random"
//   out: outputs
//
// Every field is optional; an unknown key, a wrong type or a bad value is one Error line naming
// the file and the key.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fluxrt::runtime {

struct RunConfig {
  std::optional<std::string> model;  // folder, .safetensors file or hub repo id
  std::optional<int> width, height;  // YAML "size: WxH"
  std::optional<int> steps;
  std::optional<float> guidance;
  // Absent: not set here. Set with random_seed = true: "seed: random" (a fresh seed per run).
  std::optional<uint64_t> seed;
  bool random_seed = false;
  std::optional<int> max_sequence_length;
  std::optional<std::string> dtype;   // "bf16" or "f32"
  std::optional<std::string> device;  // "cpu", "cuda", "cuda:N"
  std::optional<int> threads;
  std::optional<bool> low_memory;
  std::optional<int> batch;  // images per prompt
  std::optional<std::string> out_dir;
  std::optional<std::string> filename_pattern;  // see generate_job.h
  std::optional<std::string> negative_prompt;
  std::optional<std::vector<std::string>> prompts;
  // FLUX.1 only (diffusers FluxImg2ImgPipeline / FluxPipeline): img2img from a PNG with a strength
  // in (0, 1], and true CFG (used when > 1 and a negative prompt is given, as diffusers does).
  std::optional<std::string> init_image;  // a preset's relative path is taken from its folder when it exists there
  std::optional<float> strength;
  std::optional<float> true_cfg;
  std::optional<std::string> vae_tiling;  // "auto", "on" or "off" (both families)
  // LoRA files merged into the transformer at load: YAML `loras:` a list of {path, strength} maps
  // (or plain paths, strength 1); flags --lora FILE[:STRENGTH]. A preset's relative path is taken
  // from its folder when the file is there. Flags replace the preset's list as a whole.
  struct LoraEntry {
    std::string path;
    float strength = 1.0f;
  };
  std::optional<std::vector<LoraEntry>> loras;

  std::string source;  // the file this came from ("" for flags), for messages and relative paths
};

// The keys a preset may hold, in documentation order.
const std::vector<std::string>& run_config_keys();

// Parses YAML text; `source` names it in error messages. An empty document is an empty preset.
RunConfig parse_run_config(const std::string& yaml_text, const std::string& source);
// Reads and parses a preset file. Errors: NotFound, Io, Format, InvalidArgument.
RunConfig load_run_config(const std::filesystem::path& file);

// Fields set in `over` replace those of `base` (flags over preset).
RunConfig merge_run_config(const RunConfig& base, const RunConfig& over);

// Folders searched for a preset name, in order: $FLUXRT_CONFIG_DIR, the source tree's configs/
// (builds run from the tree), <exe>/../share/fluxrt/configs (installs). Missing ones are skipped.
std::vector<std::filesystem::path> preset_search_dirs();
// "demo" -> <dir>/demo.yaml from preset_search_dirs(); anything containing a '/' or ending in
// .yaml/.yml is taken as a file path. NotFound lists where it looked.
std::filesystem::path find_preset(const std::string& name_or_path);

// Parses "WxH" (e.g. 1024x768); InvalidArgument naming `what` otherwise. Only checks the syntax
// and positivity; multiples of 2 x the VAE factor and memory are the pipeline's validate_size.
void parse_size(const std::string& text, const std::string& what, int* width, int* height);

// Parses "FILE[:STRENGTH]" (--lora): the strength after the last ':' when that parses as a finite
// number (negative allowed), else the whole text is the file with strength 1. InvalidArgument for
// an empty file name.
RunConfig::LoraEntry parse_lora_flag(const std::string& text);

// Folders shipped with fluxrt: the source tree (compile-time FLUXRT_SOURCE_DIR) and
// <exe>/../share/fluxrt of an install. Empty paths are skipped by callers.
std::filesystem::path source_tree_dir();
std::filesystem::path install_share_dir();

}  // namespace fluxrt::runtime
