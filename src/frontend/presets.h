#pragma once
// Run presets (docs/cli.md): small YAML files under configs/ that hold the defaults of a run:
// request fields by their keys in the field table (size, steps, guidance, seed, ...; a value is
// checked as the flag's would be), the model and how to open it, the output folder and file-name
// pattern, prompts. Precedence, highest first: what the front end states (flags, keywords), the
// preset, the model's own defaults.
//
//   # configs/demo.yaml
//   size: 64x64
//   steps: 50
//   seed: 0            # or "random"
//
// Every key is optional; an unknown key, a wrong type or a bad value is one Error line naming the
// file, the line and the key.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fluxrt/request.h"

namespace fluxrt::frontend {

struct Preset {
  // Request fields by key (fluxrt/request_fields.h) as written, and each one's "file:line: key"
  // for messages.
  std::map<std::string, std::string> fields;
  std::map<std::string, std::string> where;
  std::optional<std::vector<std::string>> prompts;
  // The image being edited and its inpainting mask (white repaints): a relative path is taken from
  // the preset's folder when it exists there.
  std::optional<std::string> init_image, mask;
  // The model and how to open it.
  std::optional<std::string> model;
  std::optional<std::string> dtype;       // "bf16", "f32" or "int8"
  std::optional<std::string> device;      // "cpu", "cuda", "cuda:N"
  std::optional<std::string> vae_tiling;  // "auto", "on" or "off"
  std::optional<int> threads;
  std::optional<bool> low_memory;
  // LoRA files merged into the transformer at load: YAML `loras:` a list of {path, strength} maps
  // (or plain paths, strength 1). A relative path is taken from the preset's folder when the file
  // is there.
  std::optional<std::vector<Lora>> loras;
  // Where `fluxrt generate` writes.
  std::optional<std::string> out_dir;
  std::optional<std::string> filename_pattern;

  std::string source;  // the file this came from, "" for none
};

// The keys a preset may hold, in documentation order.
const std::vector<std::string>& preset_keys();

// Parses YAML text; `source` names it in error messages. An empty document is an empty preset.
Preset parse_preset(const std::string& yaml_text, const std::string& source);
// Reads and parses a preset file. Errors: NotFound, Io, Format, InvalidArgument.
Preset load_preset(const std::filesystem::path& file);

// What is set in `over` replaces what `base` sets (a preset over default.yaml).
Preset merge_presets(const Preset& base, const Preset& over);

// Folders searched for a preset name, in order: $FLUXRT_CONFIG_DIR, the source tree's configs/
// (builds run from the tree), <exe>/../share/fluxrt/configs (installs). Missing ones are skipped.
std::vector<std::filesystem::path> preset_search_dirs();
// "demo" -> <dir>/demo.yaml from preset_search_dirs(); anything containing a '/' or ending in
// .yaml/.yml is taken as a file path. NotFound lists where it looked.
std::filesystem::path find_preset(const std::string& name_or_path);
// The shipped preset `name` ("default", "demo"), or an empty path when none is shipped.
std::filesystem::path shipped_preset(const std::string& name);

}  // namespace fluxrt::frontend
