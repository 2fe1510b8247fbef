#include "runtime/run_config.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/error.h"

namespace fluxrt::runtime {
namespace fs = std::filesystem;

namespace {

// "file:line: key: message" -- one line, so the CLI can print it as is.
[[noreturn]] void bad_key(const std::string& source, const YAML::Node& node, const std::string& key,
                          const std::string& message) {
  const YAML::Mark mark = node.Mark();
  const std::string where = mark.is_null() ? source : fmt::format("{}:{}", source, mark.line + 1);
  fail(ErrorCode::InvalidArgument, "{}: '{}' {}", where, key, message);
}

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
    bad_key(source, node, key, fmt::format("must be an integer, got '{}'", text));
  if (value < lo || value > hi) bad_key(source, node, key, fmt::format("must be in [{}, {}], got {}", lo, hi, value));
  return value;
}

float real(const std::string& source, const YAML::Node& node, const std::string& key) {
  const std::string text = scalar(source, node, key);
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value))
    bad_key(source, node, key, fmt::format("must be a number, got '{}'", text));
  if (value < 0) bad_key(source, node, key, fmt::format("must not be negative, got {}", text));
  return static_cast<float>(value);
}

bool boolean(const std::string& source, const YAML::Node& node, const std::string& key) {
  const std::string text = scalar(source, node, key);
  if (text == "true" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "no" || text == "off") return false;
  bad_key(source, node, key, fmt::format("must be true or false, got '{}'", text));
}

std::string one_of(const std::string& source, const YAML::Node& node, const std::string& key,
                   const std::vector<std::string>& allowed) {
  const std::string text = scalar(source, node, key);
  for (const std::string& a : allowed)
    if (text == a) return text;
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
  bad_key(source, node, key, fmt::format("must be one of {}, got '{}'", list, text));
}

std::string non_empty(const std::string& source, const YAML::Node& node, const std::string& key) {
  std::string text = scalar(source, node, key);
  if (text.empty()) bad_key(source, node, key, "must not be empty");
  return text;
}

}  // namespace

const std::vector<std::string>& run_config_keys() {
  static const std::vector<std::string> keys = {"model",      "size",
                                                "steps",      "guidance",
                                                "seed",       "max_sequence_length",
                                                "dtype",      "device",
                                                "threads",    "low_memory",
                                                "batch",      "out",
                                                "filename",   "negative_prompt",
                                                "prompts",    "init_image",
                                                "strength",   "true_cfg",
                                                "vae_tiling", "loras"};
  return keys;
}

RunConfig parse_run_config(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    const std::string where = e.mark.is_null() ? source : fmt::format("{}:{}", source, e.mark.line + 1);
    fail(ErrorCode::Format, "{}: invalid YAML: {}", where, e.msg);
  }
  RunConfig config;
  config.source = source;
  if (root.IsNull()) return config;
  FLUXRT_CHECK(root.IsMap(), ErrorCode::Format, "{}: a preset must be a map of key: value lines", source);

  for (const auto& item : root) {
    const std::string key = item.first.IsScalar() ? item.first.Scalar() : std::string("?");
    const YAML::Node& value = item.second;
    bool known = false;
    for (const std::string& k : run_config_keys()) known = known || k == key;
    if (!known) {
      std::string list;
      for (const std::string& k : run_config_keys()) list += (list.empty() ? "" : ", ") + k;
      bad_key(source, item.first, key, fmt::format("is not a preset key (known: {})", list));
    }
    if (value.IsNull()) continue;  // "key:" with no value leaves the default
    if (key == "model") {
      config.model = non_empty(source, value, key);
    } else if (key == "size") {
      int w = 0, h = 0;
      const std::string text = scalar(source, value, key);
      try {
        parse_size(text, "size", &w, &h);
      } catch (const Error&) {
        bad_key(source, value, key, fmt::format("must be WxH, e.g. 1024x1024, got '{}'", text));
      }
      config.width = w;
      config.height = h;
    } else if (key == "steps") {
      config.steps = integer<int>(source, value, key, 1, 1000);
    } else if (key == "guidance") {
      config.guidance = real(source, value, key);
    } else if (key == "seed") {
      if (value.IsScalar() && value.Scalar() == "random") {
        config.random_seed = true;
        config.seed.reset();
      } else {
        config.seed = integer<uint64_t>(source, value, key, 0, UINT64_MAX);
      }
    } else if (key == "max_sequence_length") {
      config.max_sequence_length = integer<int>(source, value, key, 1, 512);
    } else if (key == "dtype") {
      config.dtype = one_of(source, value, key, {"bf16", "f32"});
    } else if (key == "device") {
      config.device = non_empty(source, value, key);
    } else if (key == "threads") {
      config.threads = integer<int>(source, value, key, 0, 4096);
    } else if (key == "low_memory") {
      config.low_memory = boolean(source, value, key);
    } else if (key == "batch") {
      config.batch = integer<int>(source, value, key, 1, 256);
    } else if (key == "out") {
      config.out_dir = non_empty(source, value, key);
    } else if (key == "filename") {
      config.filename_pattern = non_empty(source, value, key);
    } else if (key == "negative_prompt") {
      config.negative_prompt = scalar(source, value, key);
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
      config.prompts = std::move(prompts);
    } else if (key == "init_image") {
      config.init_image = non_empty(source, value, key);
    } else if (key == "strength") {
      const float strength = real(source, value, key);
      if (!(strength > 0.0f && strength <= 1.0f))
        bad_key(source, value, key, fmt::format("must be in (0, 1], got {}", value.Scalar()));
      config.strength = strength;
    } else if (key == "true_cfg") {
      config.true_cfg = real(source, value, key);
    } else if (key == "vae_tiling") {
      config.vae_tiling = one_of(source, value, key, {"auto", "on", "off"});
    } else if (key == "loras") {
      if (!value.IsSequence()) bad_key(source, value, key, "must be a list of {path, strength} entries");
      std::vector<RunConfig::LoraEntry> loras;
      for (const YAML::Node& entry : value) {
        RunConfig::LoraEntry l;
        if (entry.IsScalar()) {
          l.path = non_empty(source, entry, key);
        } else if (entry.IsMap()) {
          for (const auto& field : entry) {
            const std::string name = field.first.IsScalar() ? field.first.Scalar() : std::string("?");
            if (name == "path") {
              l.path = non_empty(source, field.second, "loras.path");
            } else if (name == "strength") {
              const std::string text = scalar(source, field.second, "loras.strength");
              char* end = nullptr;
              const double v = std::strtod(text.c_str(), &end);
              if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
                bad_key(source, field.second, "loras.strength",
                        fmt::format("must be a number, got '{}'", text));
              l.strength = static_cast<float>(v);
            } else {
              bad_key(source, field.first, "loras." + name, "is not a LoRA field (known: path, strength)");
            }
          }
          if (l.path.empty()) bad_key(source, entry, key, "entry has no path");
        } else {
          bad_key(source, entry, key, "entries must be {path, strength} maps or paths");
        }
        loras.push_back(std::move(l));
      }
      config.loras = std::move(loras);
    }
  }
  return config;
}

RunConfig load_run_config(const fs::path& file) {
  std::error_code ec;
  FLUXRT_CHECK(fs::is_regular_file(file, ec), ErrorCode::NotFound, "preset {} not found", file.string());
  std::ifstream in(file, std::ios::binary);
  FLUXRT_CHECK(in.good(), ErrorCode::Io, "cannot read preset {}", file.string());
  std::stringstream text;
  text << in.rdbuf();
  FLUXRT_CHECK(!in.bad(), ErrorCode::Io, "cannot read preset {}", file.string());
  RunConfig config = parse_run_config(text.str(), file.string());
  // A relative model path in a preset means relative to the preset's folder when it exists there,
  // so a preset keeps working from any cwd; otherwise it stays as written (a hub repo id). The
  // same for the init image (otherwise relative to the cwd, as a flag's).
  for (std::optional<std::string>* path : {&config.model, &config.init_image}) {
    if (!*path || !fs::path(**path).is_relative()) continue;
    const fs::path beside = file.parent_path() / **path;
    if (fs::exists(beside, ec)) *path = fs::absolute(beside, ec).lexically_normal().string();
  }
  if (config.loras)
    for (RunConfig::LoraEntry& l : *config.loras) {
      if (!fs::path(l.path).is_relative()) continue;
      const fs::path beside = file.parent_path() / l.path;
      if (fs::exists(beside, ec)) l.path = fs::absolute(beside, ec).lexically_normal().string();
    }
  return config;
}

RunConfig merge_run_config(const RunConfig& base, const RunConfig& over) {
  RunConfig out = base;
  auto take = [](auto& dst, const auto& src) {
    if (src) dst = src;
  };
  take(out.model, over.model);
  take(out.width, over.width);
  take(out.height, over.height);
  take(out.steps, over.steps);
  take(out.guidance, over.guidance);
  if (over.seed) {
    out.seed = over.seed;
    out.random_seed = false;
  } else if (over.random_seed) {
    out.seed.reset();
    out.random_seed = true;
  }
  take(out.max_sequence_length, over.max_sequence_length);
  take(out.dtype, over.dtype);
  take(out.device, over.device);
  take(out.threads, over.threads);
  take(out.low_memory, over.low_memory);
  take(out.batch, over.batch);
  take(out.out_dir, over.out_dir);
  take(out.filename_pattern, over.filename_pattern);
  take(out.negative_prompt, over.negative_prompt);
  take(out.prompts, over.prompts);
  take(out.init_image, over.init_image);
  take(out.strength, over.strength);
  take(out.true_cfg, over.true_cfg);
  take(out.vae_tiling, over.vae_tiling);
  take(out.loras, over.loras);
  if (!over.source.empty()) out.source = over.source;
  return out;
}

RunConfig::LoraEntry parse_lora_flag(const std::string& text) {
  RunConfig::LoraEntry l{text, 1.0f};
  const size_t colon = text.rfind(':');
  if (colon != std::string::npos) {
    const std::string tail = text.substr(colon + 1);
    char* end = nullptr;
    const double v = std::strtod(tail.c_str(), &end);
    if (!tail.empty() && end == tail.c_str() + tail.size() && std::isfinite(v)) {
      l.path = text.substr(0, colon);
      l.strength = static_cast<float>(v);
    }
  }
  FLUXRT_CHECK(!l.path.empty(), ErrorCode::InvalidArgument, "--lora '{}': no file name (FILE[:STRENGTH])",
               text);
  return l;
}

fs::path source_tree_dir() {
#ifdef FLUXRT_SOURCE_DIR
  return fs::path(FLUXRT_SOURCE_DIR);
#else
  return {};
#endif
}

fs::path install_share_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec || exe.empty()) return {};
  return exe.parent_path().parent_path() / "share" / "fluxrt";
}

std::vector<fs::path> preset_search_dirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("FLUXRT_CONFIG_DIR"); env && *env) dirs.emplace_back(env);
  if (const fs::path src = source_tree_dir(); !src.empty()) dirs.push_back(src / "configs");
  if (const fs::path share = install_share_dir(); !share.empty()) dirs.push_back(share / "configs");
  return dirs;
}

fs::path find_preset(const std::string& name_or_path) {
  FLUXRT_CHECK(!name_or_path.empty(), ErrorCode::InvalidArgument, "--config: empty preset name");
  const fs::path as_path(name_or_path);
  const std::string ext = as_path.extension().string();
  if (name_or_path.find('/') != std::string::npos || ext == ".yaml" || ext == ".yml") {
    std::error_code ec;
    FLUXRT_CHECK(fs::is_regular_file(as_path, ec), ErrorCode::NotFound, "preset file {} not found", name_or_path);
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

void parse_size(const std::string& text, const std::string& what, int* width, int* height) {
  const size_t x = text.find_first_of("xX");
  auto parse_int = [&](std::string_view s, int* out) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size() && *out > 0;
  };
  int w = 0, h = 0;
  const std::string_view view(text);
  if (x == std::string::npos || !parse_int(view.substr(0, x), &w) || !parse_int(view.substr(x + 1), &h))
    fail(ErrorCode::InvalidArgument, "invalid {} '{}' (expected WxH with positive integers, e.g. 1024x1024)", what,
         text);
  *width = w;
  *height = h;
}

}  // namespace fluxrt::runtime
