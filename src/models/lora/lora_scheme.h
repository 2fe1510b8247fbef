#pragma once
// How one transformer architecture's layers appear in LoRA files: which normalised module names
// (lora_file.h) only it has, and which of its canonical weights a module adapts. models/flux
// provides one per architecture (flux1_lora_scheme(), flux2_lora_scheme()); each pipeline kind
// names its own, and the pipeline registry tells which family a file is for by asking them.
#include <string>
#include <vector>

#include "models/lora/lora_file.h"

namespace fluxrt::models {

struct LoraNameScheme {
  const char* family = "";  // how messages and `fluxrt info` name the architecture: "FLUX.1"
  // Whether `module` names a layer only this architecture has, among the architectures whose LoRA
  // files share key names: such a module tells which one a file is for.
  bool (*only_here)(const std::string& module) = nullptr;
  // The canonical weights one transformer module adapts, in the row order of its B matrix (one
  // entry: the whole module).
  std::vector<std::string> (*targets_of)(const std::string& module) = nullptr;
  // The other architectures whose LoRA files use the same key names: a file adapting a layer only
  // one of them has is refused by name (lora_deltas).
  std::vector<const LoraNameScheme*> (*rivals)() = nullptr;
};

// Which of `schemes` a LoRA file is for.
struct LoraFamily {
  const LoraNameScheme* scheme = nullptr;  // null: the file adapts only layers they all have
  std::string module;                      // the first module (by stored key) that told it
};

// The scheme whose only-here layers `lora` adapts. Format error when it adapts layers only one
// scheme has and layers only another has.
LoraFamily lora_family(const LoraFile& lora, const std::vector<const LoraNameScheme*>& schemes);

}  // namespace fluxrt::models
