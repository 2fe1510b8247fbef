// Run presets (frontend/presets.h): YAML in, checked values out.
#include "frontend/presets.h"

#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

#include "core/error.h"
#include "fluxrt/request_fields.h"
#include "io/utf8.h"
#include "runtime/model_resolution.h"

namespace fluxrt::frontend {
namespace fs = std::filesystem;

namespace {

// "file:line: key: message" -- one line, so the CLI can print it as is. The key (an unknown one
// is the file's text) and the values in `message` (shown()) are escaped for that.
[[noreturn]] void bad_key(const std::string& source, const YAML::Node& node, const std::string& key,
                          const std::string& message) {
  const YAML::Mark mark = node.Mark();
  const std::string where = mark.is_null() ? source : fmt::format("{}:{}", source, mark.line + 1);
  fail(ErrorCode::InvalidArgument, "{}: '{}' {}", where, io::escape_for_message(key, 60), message);
}

// A value of the file in a message: a YAML scalar may span lines (`|`) or hold any bytes.
std::string shown(const std::string& text) { return io::escape_for_message(text, 60); }

std::string scalar(const std::string& source, const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar()) bad_key(source, node, key, "must be a single value, not a list or a map");
  return node.Scalar();
}

template <typename Int>
Int integer(const std::string& source, const YAML::Node& node, const std::string& key, Int lo, Int hi) {
  const std::string text = scalar(source, node, key);
  Int value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    bad_key(source, node, key, fmt::format("must be an integer, got '{}'", shown(text)));
  if (value < lo || value > hi)
    bad_key(source, node, key, fmt::format("must be in [{}, {}], got {}", lo, hi, value));
  return value;
}

bool boolean(const std::string& source, const YAML::Node& node, const std::string& key) {
  const std::string text = scalar(source, node, key);
  if (text == "true" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "no" || text == "off") return false;
  bad_key(source, node, key, fmt::format("must be true or false, got '{}'", shown(text)));
}

std::string one_of(const std::string& source, const YAML::Node& node, const std::string& key,
                   const std::vector<std::string>& allowed) {
  const std::string text = scalar(source, node, key);
  for (const std::string& a : allowed)
    if (text == a) return text;
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
  bad_key(source, node, key, fmt::format("must be one of {}, got '{}'", list, shown(text)));
}

std::string non_empty(const std::string& source, const YAML::Node& node, const std::string& key) {
  std::string text = scalar(source, node, key);
  if (text.empty()) bad_key(source, node, key, "must not be empty");
  return text;
}

// A relative path in a preset means relative to the preset's folder when it exists there, so a
// preset keeps working from any cwd; otherwise it stays as written (a hub repo id, a cwd path).
std::string beside_preset(const fs::path& file, const std::string& path) {
  if (!fs::path(path).is_relative()) return path;
  std::error_code ec;
  const fs::path beside = file.parent_path() / path;
  return fs::exists(beside, ec) ? fs::absolute(beside, ec).lexically_normal().string() : path;
}

Lora lora_entry(const std::string& source, const YAML::Node& entry) {
  Lora l;
  if (entry.IsScalar()) {
    l.path = non_empty(source, entry, "loras");
  } else if (entry.IsMap()) {
    for (const auto& field : entry) {
      const std::string name = field.first.IsScalar() ? field.first.Scalar() : std::string("?");
      if (name == "path") {
        l.path = non_empty(source, field.second, "loras.path");
      } else if (name == "strength") {
        const std::string text = scalar(source, field.second, "loras.strength");
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        // Finite as the float it is kept in: 1e300 would be an infinite strength.
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) ||
            std::fabs(v) > std::numeric_limits<float>::max())
          bad_key(source, field.second, "loras.strength",
                  fmt::format("must be a number, got '{}'", shown(text)));
        l.strength = static_cast<float>(v);
      } else {
        bad_key(source, field.first, "loras." + name, "is not a LoRA field (known: path, strength)");
      }
    }
    if (l.path.empty()) bad_key(source, entry, "loras", "entry has no path");
  } else {
    bad_key(source, entry, "loras", "entries must be {path, strength} maps or paths");
  }
  return l;
}

}  // namespace

const std::vector<std::string>& preset_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = {"model"};
    for (const RequestField& f : request_fields()) k.push_back(f.key);
    for (const char* other : {"dtype", "device", "threads", "low_memory", "out", "filename", "prompts",
                              "init_image", "mask", "vae_tiling", "loras"})
      k.push_back(other);
    return k;
  }();
  return keys;
}

Preset parse_preset(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    const std::string where = e.mark.is_null() ? source : fmt::format("{}:{}", source, e.mark.line + 1);
    // yaml-cpp quotes the offending character, which may be a lone byte or a line break.
    fail(ErrorCode::Format, "{}: invalid YAML: {}", where, io::escape_for_message(e.msg));
  }
  Preset preset;
  preset.source = source;
  if (root.IsNull()) return preset;
  FLUXRT_CHECK(root.IsMap(), ErrorCode::Format, "{}: a preset must be a map of key: value lines", source);

  for (const auto& item : root) {
    const std::string key = item.first.IsScalar() ? item.first.Scalar() : std::string("?");
    const YAML::Node& value = item.second;
    bool known = false;
    for (const std::string& k : preset_keys()) known = known || k == key;
    if (!known) {
      std::string list;
      for (const std::string& k : preset_keys()) list += (list.empty() ? "" : ", ") + k;
      bad_key(source, item.first, key, fmt::format("is not a preset key (known: {})", list));
    }
    if (value.IsNull()) continue;  // "key:" with no value leaves the default
    if (const RequestField* field = find_request_field(key)) {
      const std::string text = scalar(source, value, key);
      const YAML::Mark mark = value.Mark();
      const std::string where = mark.is_null() ? fmt::format("{}: {}", source, key)
                                               : fmt::format("{}:{}: {}", source, mark.line + 1, key);
      GenerateRequest scratch;  // the value checked now, with the bounds every model has
      set_request_field(scratch, *field, text, request_limits(), where);
      preset.fields[key] = text;
      preset.where[key] = where;
    } else if (key == "model") {
      preset.model = non_empty(source, value, key);
    } else if (key == "dtype") {
      preset.dtype = one_of(source, value, key, {"bf16", "f32", "int8"});
    } else if (key == "device") {
      preset.device = non_empty(source, value, key);
    } else if (key == "threads") {
      preset.threads = integer<int>(source, value, key, 0, 4096);
    } else if (key == "low_memory") {
      preset.low_memory = boolean(source, value, key);
    } else if (key == "out") {
      preset.out_dir = non_empty(source, value, key);
    } else if (key == "filename") {
      preset.filename_pattern = non_empty(source, value, key);
    } else if (key == "prompts") {
      std::vector<std::string> prompts;
      if (value.IsScalar()) {
        prompts.push_back(value.Scalar());
      } else if (value.IsSequence()) {
        for (const YAML::Node& p : value) prompts.push_back(scalar(source, p, key));
        if (prompts.empty()) bad_key(source, value, key, "must hold at least one prompt");
      } else {
        bad_key(source, value, key, "must be a string or a list of strings");
      }
      preset.prompts = std::move(prompts);
    } else if (key == "init_image") {
      preset.init_image = non_empty(source, value, key);
    } else if (key == "mask") {
      preset.mask = non_empty(source, value, key);
    } else if (key == "vae_tiling") {
      preset.vae_tiling = one_of(source, value, key, {"auto", "on", "off"});
    } else if (key == "loras") {
      if (!value.IsSequence()) bad_key(source, value, key, "must be a list of {path, strength} entries");
      std::vector<Lora> loras;
      for (const YAML::Node& entry : value) loras.push_back(lora_entry(source, entry));
      preset.loras = std::move(loras);
    }
  }
  return preset;
}

Preset load_preset(const fs::path& file) {
  std::error_code ec;
  FLUXRT_CHECK(fs::is_regular_file(file, ec), ErrorCode::NotFound, "preset {} not found", file.string());
  std::ifstream in(file, std::ios::binary);
  FLUXRT_CHECK(in.good(), ErrorCode::Io, "cannot read preset {}", file.string());
  std::stringstream text;
  text << in.rdbuf();
  FLUXRT_CHECK(!in.bad(), ErrorCode::Io, "cannot read preset {}", file.string());
  Preset preset = parse_preset(text.str(), file.string());
  for (std::optional<std::string>* path : {&preset.model, &preset.init_image, &preset.mask})
    if (*path) **path = beside_preset(file, **path);
  if (preset.loras)
    for (Lora& l : *preset.loras) l.path = beside_preset(file, l.path);
  return preset;
}

Preset merge_presets(const Preset& base, const Preset& over) {
  Preset out = base;
  auto take = [](auto& dst, const auto& src) {
    if (src) dst = src;
  };
  for (const auto& [key, text] : over.fields) {
    out.fields[key] = text;
    out.where[key] = over.where.at(key);
  }
  take(out.prompts, over.prompts);
  take(out.init_image, over.init_image);
  take(out.mask, over.mask);
  take(out.model, over.model);
  take(out.dtype, over.dtype);
  take(out.device, over.device);
  take(out.vae_tiling, over.vae_tiling);
  take(out.threads, over.threads);
  take(out.low_memory, over.low_memory);
  take(out.loras, over.loras);
  take(out.out_dir, over.out_dir);
  take(out.filename_pattern, over.filename_pattern);
  if (!over.source.empty()) out.source = over.source;
  return out;
}

std::vector<fs::path> preset_search_dirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("FLUXRT_CONFIG_DIR"); env && *env) dirs.emplace_back(env);
  if (const fs::path src = runtime::source_tree_dir(); !src.empty()) dirs.push_back(src / "configs");
  if (const fs::path share = runtime::install_share_dir(); !share.empty()) dirs.push_back(share / "configs");
  return dirs;
}

fs::path find_preset(const std::string& name_or_path) {
  FLUXRT_CHECK(!name_or_path.empty(), ErrorCode::InvalidArgument, "--config: empty preset name");
  const fs::path as_path(name_or_path);
  const std::string ext = as_path.extension().string();
  if (name_or_path.find('/') != std::string::npos || ext == ".yaml" || ext == ".yml") {
    std::error_code ec;
    FLUXRT_CHECK(fs::is_regular_file(as_path, ec), ErrorCode::NotFound, "preset file {} not found",
                 name_or_path);
    return as_path;
  }
  std::string looked;
  for (const fs::path& dir : preset_search_dirs()) {
    const fs::path candidate = dir / (name_or_path + ".yaml");
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) return candidate;
    looked += (looked.empty() ? "" : ", ") + candidate.string();
  }
  fail(ErrorCode::NotFound, "preset '{}' not found (looked for {})", name_or_path,
       looked.empty() ? std::string("no preset folders") : looked);
}

fs::path shipped_preset(const std::string& name) {
  std::error_code ec;
  for (const fs::path& dir : preset_search_dirs())
    if (fs::exists(dir / (name + ".yaml"), ec)) return dir / (name + ".yaml");
  return {};
}

}  // namespace fluxrt::frontend
