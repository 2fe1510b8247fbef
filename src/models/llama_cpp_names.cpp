#include "models/llama_cpp_names.h"

#include <algorithm>
#include <cctype>

namespace fluxrt::models {
namespace {

// For "<prefix>N.<rest>": N and the offset of <rest>; false for any other name.
bool split_indexed(const std::string& name, const std::string& prefix, int64_t* index, size_t* rest) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  size_t i = prefix.size();
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == prefix.size() || i >= name.size() || name[i] != '.' || i - prefix.size() > 9) return false;
  *index = std::stoll(name.substr(prefix.size(), i - prefix.size()));
  *rest = i + 1;
  return true;
}

}  // namespace

TensorStore from_llama_cpp_names(const TensorStore& raw, const LlamaCppNames& names) {
  TensorStore out;
  out.set_description(raw.description());
  for (const std::string& name : raw.names()) {
    if (names.skip && names.skip(name)) continue;
    std::string to = name;
    int64_t index = 0;
    size_t rest = 0;
    if (split_indexed(name, names.block_prefix, &index, &rest)) {
      for (const auto& [from, mapped] : names.block)
        if (name.compare(rest, std::string::npos, from) == 0)
          to = names.layer_prefix + std::to_string(index) + "." + mapped;
    } else {
      for (const auto& [from, mapped] : names.whole)
        if (name == from) to = mapped;
    }
    out.add_entry(to, raw, name);
  }
  return out;
}

const io::GgufValue* gguf_value(const io::GgufFile& file, const std::string& key) {
  auto it = file.metadata().find(key);
  return it == file.metadata().end() ? nullptr : &it->second;
}

int64_t count_indexed_layers(const TensorStore& store, const std::string& prefix) {
  int64_t layers = 0;
  for (const std::string& name : store.names()) {
    int64_t index = 0;
    size_t rest = 0;
    if (split_indexed(name, prefix, &index, &rest)) layers = std::max(layers, index + 1);
  }
  return layers;
}

}  // namespace fluxrt::models
