#include "models/lora/lora_scheme.h"

#include <algorithm>

#include "core/error.h"

namespace fluxrt::models {

LoraFamily lora_family(const LoraFile& lora, const std::vector<const LoraNameScheme*>& schemes) {
  // The modules in the order of their stored keys, so the module named is the file's first.
  std::vector<const LoraModule*> by_key;
  for (const LoraModule& m : lora.modules) by_key.push_back(&m);
  std::stable_sort(by_key.begin(), by_key.end(),
                   [](const LoraModule* a, const LoraModule* b) { return a->key < b->key; });
  LoraFamily found;
  for (const LoraModule* m : by_key) {
    for (const LoraNameScheme* scheme : schemes) {
      if (!scheme->only_here(m->module)) continue;
      if (found.scheme == nullptr) {
        found = {scheme, m->module};
      } else if (found.scheme != scheme) {
        std::string first = found.scheme->family, second = scheme->family;
        if (second < first) std::swap(first, second);
        fail(ErrorCode::Format, "{}: the LoRA mixes {}-only and {}-only layer names", lora.path, first,
             second);
      }
      break;
    }
  }
  return found;
}

}  // namespace fluxrt::models
