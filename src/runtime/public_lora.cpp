// The public fluxrt::inspect_lora / is_lora_file (include/fluxrt/lora.h) over models/lora.
#include <algorithm>
#include <set>

#include "core/error.h"
#include "fluxrt/lora.h"
#include "io/safetensors.h"
#include "io/sha256.h"
#include "models/lora/lora_file.h"
#include "pipelines/pipeline.h"

namespace fluxrt {
namespace {

bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

}  // namespace

bool is_lora_file(const std::string& path) {
  try {
    const auto file = io::SafetensorsFile::open(path);
    for (const auto& t : file->tensors()) {
      const std::string& n = t.name;
      for (const char* s : {".lora_A.weight", ".lora_B.weight", ".lora_down.weight", ".lora_up.weight",
                            ".lokr_w1", ".lokr_w1_a", ".hada_w1_a", ".dora_scale", ".lora_magnitude_vector"})
        if (ends_with(n, s)) return true;
      if (n.find(".processor.") != std::string::npos && ends_with(n, ".down.weight")) return true;
    }
  } catch (const Error&) {
  }
  return false;
}

LoraInfo inspect_lora(const std::string& path) {
  const models::LoraFile f = models::read_lora_file(path);
  LoraInfo info;
  info.path = path;
  info.format = f.format;
  info.family = pipelines::lora_family_name(f);
  for (const pipelines::PipelineKind* kind : pipelines::kinds_taking_lora(f))
    info.model_families.push_back(kind->detection.model_family);
  std::sort(info.model_families.begin(), info.model_families.end());
  info.model_families.erase(std::unique(info.model_families.begin(), info.model_families.end()),
                            info.model_families.end());
  std::set<int> ranks;
  std::set<float> alphas;
  for (const models::LoraModule& m : f.modules) {
    if (m.rank() > 0) ranks.insert(static_cast<int>(m.rank()));  // a LoKr of two whole halves has none
    if (m.alpha) alphas.insert(*m.alpha);
    info.modules.push_back(m.module);
    const std::string kind = models::lora_kind_name(m.kind);
    info.module_kinds.push_back(kind + (m.dora() ? "+dora" : ""));
    ++info.kinds[kind];
    if (m.dora()) ++info.kinds["dora"];
  }
  info.ranks.assign(ranks.begin(), ranks.end());
  info.alphas.assign(alphas.begin(), alphas.end());
  info.sha256 = io::sha256_file_hex(path);
  return info;
}

}  // namespace fluxrt
