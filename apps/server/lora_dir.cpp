#include "lora_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "fluxrt/lora.h"
#include "http_error.h"

namespace fluxrt::server {

namespace fs = std::filesystem;

namespace {

constexpr const char* kExtension = ".safetensors";

std::string names_of(const std::vector<LoraDirectory::Entry>& entries, size_t most) {
  std::string out;
  for (size_t i = 0; i < entries.size() && i < most; ++i) out += (i ? ", " : "") + entries[i].name;
  if (entries.size() > most) out += ", ... (" + std::to_string(entries.size()) + " in all; GET /v1/loras)";
  return out.empty() ? "none" : out;
}

HttpError bad_lora(const std::string& message, const std::string& code) {
  return HttpError(400, message, "loras", code);
}

}  // namespace

void show_path_as(std::string& text, const std::string& path, const std::string& name) {
  if (path.empty()) return;
  for (size_t at = text.find(path); at != std::string::npos; at = text.find(path, at + name.size()))
    text.replace(at, path.size(), name);
}

bool valid_lora_name(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == '+';
  });
}

LoraDirectory::LoraDirectory(std::string dir, std::string model_family)
    : dir_(std::move(dir)), model_family_(std::move(model_family)) {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec))
    throw Error(ErrorCode::InvalidArgument, "--lora-dir " + dir_ + " is not a directory");
  fs::directory_iterator probe(dir_, ec);
  if (ec) throw Error(ErrorCode::InvalidArgument, "--lora-dir " + dir_ + " cannot be read: " + ec.message());
}

LoraDirectory::Entry LoraDirectory::inspect(const std::string& name, const std::string& path, uint64_t bytes,
                                            int64_t mtime_ns) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(path);
    if (it != cache_.end() && it->second.bytes == bytes && it->second.mtime_ns == mtime_ns)
      return it->second.entry;
  }
  // Outside the lock: inspecting reads the file (its header and its A matrices for the ranks).
  Entry e;
  e.name = name;
  e.path = path;
  e.bytes = bytes;
  try {
    const LoraInfo info = inspect_lora(path);
    e.format = info.format;
    e.family = info.family;
    e.ranks = info.ranks;
    // A LoRA of only the layers every family has fits either model.
    const std::vector<std::string>& fits = info.model_families;
    if (std::find(fits.begin(), fits.end(), model_family_) == fits.end())
      e.error = "is a LoRA for " + info.family + "; this server runs a " + model_family_ + " model";
  } catch (const Error& err) {
    // The message names the file by its server-side path; the client knows it by its name.
    std::string message = err.what();
    show_path_as(message, path, name + kExtension);
    e.error = "cannot be used: " + message;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  cache_[path] = {bytes, mtime_ns, e};
  return e;
}

std::vector<LoraDirectory::Entry> LoraDirectory::list() const {
  std::vector<std::pair<std::string, std::string>> files;  // (name, path)
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file.size() <= std::string(kExtension).size() || !file.ends_with(kExtension)) continue;
    const std::string name = file.substr(0, file.size() - std::string(kExtension).size());
    if (!valid_lora_name(name)) continue;  // a request could not name it anyway
    files.emplace_back(name, it->path().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<Entry> entries;
  std::set<std::string> live;
  for (const auto& [name, path] : files) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // gone, or a folder
    const int64_t mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    entries.push_back(inspect(name, path, uint64_t(st.st_size), mtime_ns));
    live.insert(path);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(cache_, [&](const auto& kv) { return !live.count(kv.first); });
  return entries;
}

std::vector<Lora> LoraDirectory::resolve(const std::vector<LoraChoice>& choices) const {
  if (choices.empty()) return {};
  std::vector<std::string> names;  // without the extension a client may add
  std::set<std::string> seen;
  for (const LoraChoice& c : choices) {
    std::string name = c.name;
    if (name.ends_with(kExtension)) name.resize(name.size() - std::string(kExtension).size());
    names.push_back(name);
    if (!valid_lora_name(name))
      throw bad_lora("'loras': \"" + escape_for_message(c.name, 64) +
                         "\" is not a LoRA name (a file name in the server's LoRA folder, without a path)",
                     "invalid_lora");
    if (!seen.insert(name).second)
      throw bad_lora("'loras' names \"" + name + "\" twice; give it once with the summed strength",
                     "invalid_lora");
  }
  const std::vector<Entry> entries = list();
  std::vector<Lora> out;
  for (size_t i = 0; i < choices.size(); ++i) {
    const std::string& name = names[i];
    auto it = std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.name == name; });
    if (it == entries.end())
      throw bad_lora("'loras': no LoRA \"" + name + "\" on this server (it has " + names_of(entries, 8) + ")",
                     "lora_not_found");
    if (!it->error.empty()) throw bad_lora("'loras': \"" + name + "\" " + it->error, "invalid_lora");
    out.push_back({it->path, choices[i].strength});
  }
  return out;
}

}  // namespace fluxrt::server
