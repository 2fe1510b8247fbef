#pragma once
// The LoRAs a server offers per request (`fluxrt serve --lora-dir DIR`, docs/server.md): the
// .safetensors files directly in DIR, named by their file name without the extension. A request
// names them in `loras`; a name is only ever looked up among the directory's entries, never
// joined to the directory as a path, so no request field reaches any other file. The folder is
// listed again on each lookup, so files dropped in while the server runs are offered at once.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "api.h"
#include "fluxrt/engine.h"

namespace fluxrt::server {

class LoraDirectory {
 public:
  struct Entry {
    std::string name;  // the file name without ".safetensors"
    std::string path;
    uint64_t bytes = 0;
    // From fluxrt::inspect_lora, empty when `error` is set.
    std::string format, family;
    std::vector<int> ranks;
    std::string error;  // why it cannot be used ("" when it can)
  };

  // `model_family` is the served model's ("flux.1" / "flux.2"): a LoRA for the other is refused.
  // Throws InvalidArgument when `dir` is not a readable directory.
  LoraDirectory(std::string dir, std::string model_family);

  const std::string& dir() const { return dir_; }
  // Every .safetensors file in the directory, sorted by name, inspected (cached while its size
  // and modification time stay the same).
  std::vector<Entry> list() const;
  // The files the choices name, with their strengths, in order. HttpError 400 (param "loras")
  // for a name that is not a plain file name of the directory, a file that is not a usable LoRA
  // for this model, or a name given twice.
  std::vector<Lora> resolve(const std::vector<LoraChoice>& choices) const;

 private:
  struct Inspected {
    uint64_t bytes = 0;
    int64_t mtime_ns = 0;
    Entry entry;
  };
  Entry inspect(const std::string& name, const std::string& path, uint64_t bytes, int64_t mtime_ns) const;

  std::string dir_;
  std::string model_family_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, Inspected> cache_;  // by path
};

// `text` with every occurrence of the server-side `path` replaced by `name`: messages about a
// LoRA file name it as the client knows it.
void show_path_as(std::string& text, const std::string& path, const std::string& name);

// True when `name` may name a LoRA file: 1 to 200 of [A-Za-z0-9._+-], not starting with '.'.
bool valid_lora_name(const std::string& name);

}  // namespace fluxrt::server
