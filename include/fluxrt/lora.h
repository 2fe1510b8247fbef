#pragma once
// What a LoRA file holds, as `fluxrt info FILE.safetensors` shows it (docs/lora.md). Standard C++
// types only. Applying LoRAs: EngineOptions::loras (merged at load) and GenerateRequest::loras
// (per request), fluxrt/engine.h.
#include <map>
#include <string>
#include <vector>

namespace fluxrt {

struct LoraInfo {
  std::string path;
  std::string format;  // the key scheme(s): "diffusers/PEFT", "kohya", "BFL/ComfyUI", "XLabs", ...
  std::string family;  // "FLUX.1", "FLUX.2", or "FLUX.1 or FLUX.2 (only shared layers)"
  // The models it can be applied to, by their ModelInfo::family ("flux.1", "flux.2"), sorted.
  std::vector<std::string> model_families;
  std::vector<int> ranks;            // the distinct ranks, ascending
  std::vector<float> alphas;         // the distinct alphas given (tensor or metadata), ascending; empty: none
  std::vector<std::string> modules;  // the adapted layers (normalised names), sorted
  // Each module's kind, in the order of `modules`: "lora", "lokr" or "loha", "+dora" after it when
  // the module carries a DoRA magnitude.
  std::vector<std::string> module_kinds;
  // How many modules of each kind ("lokr": 12, "dora": 3; dora counts the modules with a magnitude,
  // whatever their kind).
  std::map<std::string, int> kinds;
  std::string sha256;  // of the whole file, 64 hex digits
};

// True when `path` is a safetensors file whose tensor names are a LoRA's (lora_A / lora_down /
// XLabs down-up, or LyCORIS / DoRA names); reads only the header. False for anything else,
// unreadable files included.
bool is_lora_file(const std::string& path);

// Reads and classifies a LoRA file: the errors of loading it (unknown keys, malformed LoKr / LoHa /
// DoRA modules, other LyCORIS algorithms, a corrupt file), as fluxrt::Error.
LoraInfo inspect_lora(const std::string& path);

}  // namespace fluxrt
