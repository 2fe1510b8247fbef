// Model discovery: --model spec -> local paths, and the tensor shapes of a checkpoint's header.
// Mirrors what diffusers' from_pretrained/from_single_file accept and huggingface_hub's cache
// layout (models--org--name/{refs,snapshots,blobs}), without ever touching the network.
#include "io/model_discovery.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"
#include "core/log.h"
#include "io/gguf.h"
#include "io/json_file.h"
#include "io/safetensors.h"

namespace fluxrt::io {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kIndexSuffix = ".safetensors.index.json";
constexpr const char* kFileSuffix = ".safetensors";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);  // follows symlinks, as the hub cache needs
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

struct FolderListing {
  std::vector<std::string> indexes;   // *.safetensors.index.json
  std::vector<std::string> files;     // *.safetensors without a variant infix
  std::vector<std::string> variants;  // "model.fp16.safetensors", "model.fp16-00001-of-00002.safetensors"
};

FolderListing list_weights(const fs::path& folder) {
  FolderListing out;
  std::error_code ec;
  fs::directory_iterator it(folder, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    const std::string name = it->path().filename().string();
    if (ends_with(name, kIndexSuffix)) {
      out.indexes.push_back(it->path().string());
    } else if (ends_with(name, kFileSuffix)) {
      const std::string stem = name.substr(0, name.size() - std::string_view(kFileSuffix).size());
      (stem.find('.') == std::string::npos ? out.files : out.variants).push_back(it->path().string());
    }
  }
  if (ec) fail(ErrorCode::Io, "{}: cannot list the folder: {}", folder.string(), ec.message());
  std::sort(out.indexes.begin(), out.indexes.end());
  std::sort(out.files.begin(), out.files.end());
  std::sort(out.variants.begin(), out.variants.end());
  return out;
}

// What to hand Checkpoint::open for a component folder. diffusers writes either one file, or
// shards plus an index; fp16/bf16 "variant" copies may sit next to them and must not be mixed in.
std::string pick_weights(const fs::path& folder) {
  const FolderListing l = list_weights(folder);
  if (l.indexes.size() == 1) return l.indexes.front();
  if (l.indexes.empty() && l.files.size() == 1) return l.files.front();
  if (l.indexes.empty() && l.files.empty() && l.variants.size() == 1) return l.variants.front();
  if (l.indexes.empty() && l.files.empty() && l.variants.empty()) return {};
  return folder.string();  // several files: Checkpoint::open takes them all (or explains)
}

std::string component_name_for_class(const std::string& class_name) {
  if (class_name.find("Transformer2DModel") != std::string::npos) return "transformer";
  if (class_name.rfind("Autoencoder", 0) == 0) return "vae";
  if (class_name.find("Tokenizer") != std::string::npos) return "tokenizer";
  if (class_name.find("Scheduler") != std::string::npos) return "scheduler";
  if (!class_name.empty()) return "text_encoder";
  return "model";
}

ResolvedModel resolve_pipeline_folder(const fs::path& folder) {
  ResolvedModel model;
  model.path = folder.string();
  model.source = ModelSource::PipelineFolder;
  const fs::path index_path = folder / "model_index.json";
  const json index = read_json_object(index_path);
  if (auto it = index.find("_class_name"); it != index.end() && it->is_string())
    model.pipeline_class = it->get<std::string>();
  if (auto it = index.find("is_distilled"); it != index.end() && it->is_boolean())
    model.is_distilled = it->get<bool>();
  for (const auto& [key, value] : index.items()) {
    if (key.empty() || key[0] == '_') continue;
    // Components are ["library", "ClassName"]; optional absent ones are [null, null].
    if (!value.is_array() || value.size() != 2) continue;
    if (!value[0].is_string() || !value[1].is_string()) continue;
    ModelComponent c;
    c.name = key;
    c.library = value[0].get<std::string>();
    c.class_name = value[1].get<std::string>();
    const fs::path dir = folder / key;
    c.folder = dir.string();
    c.present = is_dir(dir);
    if (c.present) c.weights = pick_weights(dir);
    model.components.push_back(std::move(c));
  }
  if (model.components.empty())
    fail(ErrorCode::Format, "{}: lists no components (not a diffusers model_index.json?)", index_path.string());
  return model;
}

ResolvedModel resolve_component_folder(const fs::path& folder) {
  ResolvedModel model;
  model.path = folder.string();
  model.source = ModelSource::ComponentFolder;
  ModelComponent c;
  c.folder = folder.string();
  c.present = true;
  const fs::path config = folder / "config.json";
  if (is_file(config)) {
    const json cfg = read_json_object(config);
    if (auto it = cfg.find("_class_name"); it != cfg.end() && it->is_string()) {
      c.library = "diffusers";
      c.class_name = it->get<std::string>();
    } else if (auto arch = cfg.find("architectures"); arch != cfg.end() && arch->is_array() && !arch->empty() &&
                                                       (*arch)[0].is_string()) {
      c.library = "transformers";
      c.class_name = (*arch)[0].get<std::string>();
    }
  }
  c.name = component_name_for_class(c.class_name);
  c.weights = pick_weights(folder);
  model.components.push_back(std::move(c));
  return model;
}

ResolvedModel resolve_single_file(const fs::path& file) {
  const std::string name = file.filename().string();
  if (!ends_with(name, kFileSuffix) && !ends_with(name, kIndexSuffix) && !is_gguf_file(file.string()))
    fail(ErrorCode::InvalidArgument,
         "{}: not a model (expected a .safetensors or GGUF file, a *{} or a model folder)", file.string(),
         kIndexSuffix);
  ResolvedModel model;
  model.path = file.string();
  model.source = ModelSource::SingleFile;
  ModelComponent c;
  c.name = "transformer";  // single files are transformers for now; their companions come later
  if (is_gguf_file(file.string())) {
    // GGUF text encoders say so in general.architecture (llama.cpp's "qwen3", "t5encoder");
    // transformer GGUFs say "flux" or nothing.
    const auto gguf = GgufFile::open(file.string());
    auto arch = gguf->metadata().find("general.architecture");
    if (arch != gguf->metadata().end() && arch->second.type == GgufValueType::String) {
      const std::string& a = arch->second.s;
      if (a == "qwen3" || a == "qwen2" || a == "t5" || a == "t5encoder" || a == "llama")
        c.name = "text_encoder";
      c.class_name = "gguf:" + a;
    }
  }
  c.present = true;
  c.weights = file.string();
  model.components.push_back(std::move(c));
  return model;
}

ResolvedModel resolve_local(const fs::path& path) {
  if (is_file(path)) {
    if (path.filename() == "model_index.json") return resolve_pipeline_folder(path.parent_path());
    return resolve_single_file(path);
  }
  if (!is_dir(path)) fail(ErrorCode::InvalidArgument, "{}: not a regular file or folder", path.string());
  if (is_file(path / "model_index.json")) return resolve_pipeline_folder(path);
  const FolderListing l = list_weights(path);
  if (is_file(path / "config.json") || !l.indexes.empty() || !l.files.empty() || !l.variants.empty())
    return resolve_component_folder(path);
  fail(ErrorCode::Format, "{}: not a model folder (no model_index.json, config.json or *.safetensors)",
       path.string());
}

// "org/name" or "org/name@rev", with the characters the Hub allows.
bool parse_repo_spec(const std::string& spec, std::string* repo, std::string* revision) {
  static const std::regex kRepo(R"(^([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)(?:@([A-Za-z0-9][A-Za-z0-9._/-]*))?$)");
  std::smatch m;
  if (!std::regex_match(spec, m, kRepo)) return false;
  *repo = m[1].str();
  *revision = m[2].matched ? m[2].str() : std::string();
  if (revision->find("..") != std::string::npos) return false;  // refs/<rev> must stay inside the repo folder
  return true;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::vector<fs::path> list_snapshots(const fs::path& snapshots) {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::directory_iterator it(snapshots, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec)) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string join_names(const std::vector<fs::path>& paths, size_t max_count = 5) {
  std::string out;
  for (size_t i = 0; i < paths.size() && i < max_count; ++i)
    out += (i ? ", " : "") + paths[i].filename().string();
  if (paths.size() > max_count) out += fmt::format(", ... ({} in all)", paths.size());
  return out.empty() ? "none" : out;
}

}  // namespace

const ModelComponent* ResolvedModel::find(std::string_view name) const {
  for (const auto& c : components)
    if (c.name == name) return &c;
  return nullptr;
}

const ModelComponent* ResolvedModel::transformer() const {
  if (const ModelComponent* c = find("transformer")) return c;
  if (source != ModelSource::PipelineFolder && components.size() == 1 && components[0].name == "model")
    return &components[0];
  return nullptr;
}

std::string hf_hub_cache_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : std::string();
  };
  if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env("HUGGINGFACE_HUB_CACHE"); !v.empty()) return v;  // the older name, still honoured
  if (std::string v = env("HF_HOME"); !v.empty()) return (fs::path(v) / "hub").string();
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty()) return (fs::path(v) / "huggingface" / "hub").string();
  if (std::string v = env("HOME"); !v.empty()) return (fs::path(v) / ".cache" / "huggingface" / "hub").string();
  return ".cache/huggingface/hub";
}

std::string find_in_hub_cache(const std::string& repo_id, const std::string& revision,
                              const std::string& hub_cache_dir, std::string* resolved_revision) {
  std::string folder_name = "models--" + repo_id;
  for (size_t pos = 0; (pos = folder_name.find('/', pos)) != std::string::npos;) folder_name.replace(pos, 1, "--");
  const fs::path repo_dir = fs::path(hub_cache_dir) / folder_name;
  if (!is_dir(repo_dir))
    fail(ErrorCode::NotFound,
         "{}: not a local path and not in the Hugging Face cache (looked for {}; set HF_HUB_CACHE or HF_HOME)",
         repo_id, repo_dir.string());
  const fs::path snapshots = repo_dir / "snapshots";
  auto use = [&](const fs::path& snap) {
    if (resolved_revision) *resolved_revision = snap.filename().string();
    return snap.string();
  };
  auto read_ref = [&](const std::string& ref) -> std::string {
    const fs::path ref_path = repo_dir / "refs" / ref;
    return is_file(ref_path) ? trim(read_small_file(ref_path)) : std::string();
  };

  if (!revision.empty()) {
    const std::string commit = read_ref(revision);
    if (!commit.empty() && is_dir(snapshots / commit)) return use(snapshots / commit);
    if (is_dir(snapshots / revision)) return use(snapshots / revision);
    fail(ErrorCode::NotFound, "{}@{}: no such revision in {} (snapshots: {})", repo_id, revision, repo_dir.string(),
         join_names(list_snapshots(snapshots)));
  }
  const std::string main_commit = read_ref("main");
  if (!main_commit.empty() && is_dir(snapshots / main_commit)) return use(snapshots / main_commit);
  std::vector<fs::path> all = list_snapshots(snapshots);
  if (all.empty())
    fail(ErrorCode::NotFound, "{}: {} has no snapshot (an interrupted download?)", repo_id, snapshots.string());
  if (all.size() == 1) return use(all.front());
  // Several snapshots and no usable refs/main: take the most recently written one, and say so.
  auto mtime = [](const fs::path& p) {
    std::error_code ec;
    auto t = fs::last_write_time(p, ec);
    return ec ? fs::file_time_type::min() : t;
  };
  const fs::path newest = *std::max_element(all.begin(), all.end(), [&](const fs::path& a, const fs::path& b) {
    return mtime(a) < mtime(b);
  });
  FLUXRT_LOG_WARN("{}: refs/main missing in {}; using the newest of {} snapshots, {}", repo_id, repo_dir.string(),
                  all.size(), newest.filename().string());
  return use(newest);
}

ResolvedModel resolve_model(const std::string& spec) { return resolve_model(spec, hf_hub_cache_dir()); }

ResolvedModel resolve_model(const std::string& spec, const std::string& hub_cache_dir) {
  if (spec.empty()) fail(ErrorCode::InvalidArgument, "empty model path");
  std::error_code ec;
  const fs::file_status st = fs::status(spec, ec);
  ResolvedModel model;
  if (fs::exists(st)) {
    model = resolve_local(fs::path(spec));
  } else {
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      fail(ErrorCode::Io, "{}: cannot read: {}", spec, ec.message());
    std::string repo, revision;
    if (!parse_repo_spec(spec, &repo, &revision)) fail(ErrorCode::NotFound, "{}: no such file or folder", spec);
    std::string resolved_revision;
    const std::string snapshot = find_in_hub_cache(repo, revision, hub_cache_dir, &resolved_revision);
    model = resolve_local(fs::path(snapshot));
    model.repo_id = repo;
    model.revision = resolved_revision;
  }
  model.spec = spec;
  return model;
}

std::map<std::string, Shape> tensor_shapes(const std::string& weights) {
  std::map<std::string, Shape> shapes;
  if (is_gguf_file(weights)) {
    const auto file = GgufFile::open(weights);  // held: the loop reads its header
    for (const GgufTensorInfo& t : file->tensors()) shapes[t.name] = t.shape;
    return shapes;
  }
  const Checkpoint ckpt = Checkpoint::open(weights);
  for (const std::string& name : ckpt.names()) shapes[name] = ckpt.info(name).shape;
  return shapes;
}

}  // namespace fluxrt::io
