// Model discovery: --model spec -> local paths, and variant detection from configs or tensor names.
// Mirrors what diffusers' from_pretrained/from_single_file accept and huggingface_hub's cache
// layout (models--org--name/{refs,snapshots,blobs}), without ever touching the network.
#include "io/model_discovery.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace fluxrt::io {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kIndexSuffix = ".safetensors.index.json";
constexpr const char* kFileSuffix = ".safetensors";
constexpr uintmax_t kMaxConfigBytes = 16u << 20;  // configs are a few KB; refuse anything absurd

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

std::string read_small_file(const fs::path& path) {
  std::error_code ec;
  const uintmax_t bytes = fs::file_size(path, ec);
  if (ec) fail(ErrorCode::Io, "{}: cannot read: {}", path.string(), ec.message());
  if (bytes > kMaxConfigBytes) fail(ErrorCode::Format, "{}: {} bytes is too large for a config file", path.string(), bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::Io, "{}: cannot open", path.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(ErrorCode::Io, "{}: read failed", path.string());
  return text;
}

// Parses a JSON object; the parser's message can span lines, so keep only its first line.
json read_json_object(const fs::path& path) {
  json root;
  try {
    root = json::parse(read_small_file(path));
  } catch (const json::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    fail(ErrorCode::Format, "{}: not valid JSON: {}", path.string(), what);
  }
  if (!root.is_object()) fail(ErrorCode::Format, "{}: expected a JSON object", path.string());
  return root;
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

// ------------------------------------------------------------------------------------------------
// Variant detection

std::string_view model_family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::Flux1: return "flux.1";
    case ModelFamily::Flux2: return "flux.2";
    case ModelFamily::Unknown: break;
  }
  return "unknown";
}

std::string_view model_variant_name(ModelVariant variant) {
  switch (variant) {
    case ModelVariant::Flux1Dev: return "flux.1-dev";
    case ModelVariant::Flux1Schnell: return "flux.1-schnell";
    case ModelVariant::Flux2Klein4B: return "flux.2-klein-4b";
    case ModelVariant::Flux2Klein9B: return "flux.2-klein-9b";
    case ModelVariant::Flux2Dev: return "flux.2-dev";
    case ModelVariant::Custom: return "custom";
    case ModelVariant::Unknown: break;
  }
  return "unknown";
}

std::string_view weight_layout_name(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::Diffusers: return "diffusers";
    case WeightLayout::Bfl: return "bfl";
    case WeightLayout::Unknown: break;
  }
  return "unknown";
}

namespace {

// Reference sizes (flux-reference.md section 1.1).
struct KnownShape {
  ModelVariant variant;
  ModelFamily family;
  int64_t hidden, double_blocks, single_blocks, context_dim, in_channels;
  bool guidance;
};
constexpr KnownShape kKnownShapes[] = {
    {ModelVariant::Flux1Dev, ModelFamily::Flux1, 3072, 19, 38, 4096, 64, true},
    {ModelVariant::Flux1Schnell, ModelFamily::Flux1, 3072, 19, 38, 4096, 64, false},
    {ModelVariant::Flux2Klein4B, ModelFamily::Flux2, 3072, 5, 20, 7680, 128, false},
    {ModelVariant::Flux2Klein9B, ModelFamily::Flux2, 4096, 8, 24, 12288, 128, false},
    {ModelVariant::Flux2Dev, ModelFamily::Flux2, 6144, 8, 48, 15360, 128, true},
};

bool is_klein(const VariantInfo& v) {
  return v.variant == ModelVariant::Flux2Klein4B || v.variant == ModelVariant::Flux2Klein9B ||
         (v.variant == ModelVariant::Custom && v.family == ModelFamily::Flux2 && !v.shape.guidance_embed);
}

// Sets variant and description from family + shape (+ distilled, already filled in).
void classify(VariantInfo& v) {
  const TransformerShape& s = v.shape;
  v.variant = ModelVariant::Custom;
  for (const KnownShape& k : kKnownShapes) {
    if (k.family == v.family && k.hidden == s.hidden_size && k.double_blocks == s.double_blocks &&
        k.single_blocks == s.single_blocks && k.context_dim == s.context_dim && k.in_channels == s.in_channels &&
        k.guidance == s.guidance_embed)
      v.variant = k.variant;
  }
  if (!is_klein(v)) {
    v.distilled.reset();
    v.distilled_from.clear();
  }
  std::string kind;
  if (v.distilled.has_value())
    kind = *v.distilled ? "distilled" : "base";
  else
    kind = "distilled or base: unknown";
  switch (v.variant) {
    case ModelVariant::Flux1Dev: v.description = "FLUX.1-dev"; break;
    case ModelVariant::Flux1Schnell: v.description = "FLUX.1-schnell"; break;
    case ModelVariant::Flux2Dev: v.description = "FLUX.2-dev (not supported)"; break;
    case ModelVariant::Flux2Klein4B:
    case ModelVariant::Flux2Klein9B: {
      const char* size = v.variant == ModelVariant::Flux2Klein4B ? "4B" : "9B";
      if (v.distilled.has_value() && !*v.distilled)
        v.description = fmt::format("FLUX.2-klein-base-{}", size);
      else
        v.description = fmt::format("FLUX.2-klein-{} ({})", size, kind);
      break;
    }
    default: {
      const std::string family = v.family == ModelFamily::Flux1 ? "flux.1" : is_klein(v) ? "flux.2-klein" : "flux.2";
      std::string details = fmt::format("hidden {}, {}+{} blocks", s.hidden_size, s.double_blocks, s.single_blocks);
      if (s.guidance_embed) details += ", guidance";
      if (v.family == ModelFamily::Flux1 && !s.guidance_embed) details += ", no guidance";
      if (is_klein(v)) details += ", " + kind;
      v.description = fmt::format("{} (custom: {})", family, details);
    }
  }
}

int64_t json_int(const json& cfg, const char* key, int64_t fallback) {
  auto it = cfg.find(key);
  return it != cfg.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

bool json_bool(const json& cfg, const char* key, bool fallback) {
  auto it = cfg.find(key);
  return it != cfg.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

using ShapeTable = std::map<std::string, Shape>;

int64_t dim(const ShapeTable& shapes, const std::string& name, int axis) {
  auto it = shapes.find(name);
  if (it == shapes.end()) return 0;
  const Shape& shape = it->second;
  return axis < shape.size() ? shape[axis] : 0;
}

// Number of blocks = highest index + 1 among names "<prefix><index>.".
int64_t count_blocks(const std::vector<std::string>& names, const std::string& prefix) {
  int64_t count = 0;
  for (const std::string& n : names) {
    if (n.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t end = n.find('.', prefix.size());
    if (end == std::string::npos || end == prefix.size()) continue;
    int64_t index = 0;
    bool digits = true;
    for (size_t i = prefix.size(); i < end && digits; ++i) {
      digits = std::isdigit(static_cast<unsigned char>(n[i])) != 0;
      if (digits && index < (int64_t{1} << 40)) index = index * 10 + (n[i] - '0');
    }
    if (digits) count = std::max(count, index + 1);
  }
  return count;
}

void distilled_from_name(VariantInfo& v, const std::string& path) {
  std::string name = fs::path(path).filename().string();
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("klein") == std::string::npos) return;  // a renamed file tells nothing
  v.distilled = name.find("base") == std::string::npos;
  v.distilled_from = "file name";
}

}  // namespace

std::map<std::string, Shape> tensor_shapes(const std::string& weights) {
  ShapeTable shapes;
  if (is_gguf_file(weights)) {
    const auto file = GgufFile::open(weights);  // held: the loop reads its header
    for (const GgufTensorInfo& t : file->tensors()) shapes[t.name] = t.shape;
    return shapes;
  }
  const Checkpoint ckpt = Checkpoint::open(weights);
  for (const std::string& name : ckpt.names()) shapes[name] = ckpt.info(name).shape;
  return shapes;
}

VariantInfo detect_variant_from_tensors(const Checkpoint& ckpt) {
  ShapeTable shapes;
  for (const std::string& name : ckpt.names()) shapes[name] = ckpt.info(name).shape;
  return detect_variant_from_shapes(shapes);
}

VariantInfo detect_variant_from_shapes(const std::map<std::string, Shape>& ckpt) {
  VariantInfo v;
  std::vector<std::string> all;
  for (const auto& [name, shape] : ckpt) all.push_back(name);
  // ComfyUI repackagings prefix every key; diffusers' single-file loader strips the same prefix.
  for (const char* prefix : {"model.diffusion_model."}) {
    if (ckpt.count(std::string(prefix) + "img_in.weight") ||
        ckpt.count(std::string(prefix) + "x_embedder.weight"))
      v.key_prefix = prefix;
  }
  const std::string& p = v.key_prefix;
  auto has = [&](const char* name) { return ckpt.count(p + name) != 0; };

  if (has("img_in.weight")) {
    v.layout = WeightLayout::Bfl;
    if (has("single_stream_modulation.lin.weight"))
      v.family = ModelFamily::Flux2;
    else if (has("time_in.in_layer.weight") && has("vector_in.in_layer.weight"))
      v.family = ModelFamily::Flux1;
    v.shape.hidden_size = dim(ckpt, p + "img_in.weight", 0);
    v.shape.in_channels = dim(ckpt, p + "img_in.weight", 1);
    v.shape.context_dim = dim(ckpt, p + "txt_in.weight", 1);
    v.shape.head_dim = std::max(dim(ckpt, p + "double_blocks.0.img_attn.norm.query_norm.scale", 0),
                                dim(ckpt, p + "single_blocks.0.norm.query_norm.scale", 0));
    v.shape.double_blocks = count_blocks(all, p + "double_blocks.");
    v.shape.single_blocks = count_blocks(all, p + "single_blocks.");
    v.shape.guidance_embed = has("guidance_in.in_layer.weight");
  } else if (has("x_embedder.weight")) {
    v.layout = WeightLayout::Diffusers;
    if (has("single_stream_modulation.linear.weight"))
      v.family = ModelFamily::Flux2;
    else if (has("time_text_embed.timestep_embedder.linear_1.weight"))
      v.family = ModelFamily::Flux1;
    v.shape.hidden_size = dim(ckpt, p + "x_embedder.weight", 0);
    v.shape.in_channels = dim(ckpt, p + "x_embedder.weight", 1);
    v.shape.context_dim = dim(ckpt, p + "context_embedder.weight", 1);
    v.shape.head_dim = std::max(dim(ckpt, p + "transformer_blocks.0.attn.norm_q.weight", 0),
                                dim(ckpt, p + "single_transformer_blocks.0.attn.norm_q.weight", 0));
    v.shape.double_blocks = count_blocks(all, p + "transformer_blocks.");
    v.shape.single_blocks = count_blocks(all, p + "single_transformer_blocks.");
    v.shape.guidance_embed = has("time_text_embed.guidance_embedder.linear_1.weight") ||
                             has("time_guidance_embed.guidance_embedder.linear_1.weight");
  }
  if (v.shape.head_dim > 0) v.shape.num_heads = v.shape.hidden_size / v.shape.head_dim;
  if (v.family == ModelFamily::Unknown) {
    v.description = "not a FLUX transformer checkpoint";
    return v;
  }
  classify(v);
  return v;
}

VariantInfo detect_variant(const ResolvedModel& model) {
  const ModelComponent* tc = model.transformer();
  if (tc == nullptr || !tc->present) {
    VariantInfo v;
    v.description = tc == nullptr ? "no transformer component" : "transformer folder missing";
    // A GGUF text encoder (resolve_single_file names it by general.architecture): say how it is used.
    const ModelComponent* te = model.find("text_encoder");
    if (tc == nullptr && model.source == ModelSource::SingleFile && te &&
        te->class_name.rfind("gguf:", 0) == 0)
      v.description = fmt::format("a {} text encoder, not a transformer (run it with --text-encoder FILE)",
                                  te->class_name.substr(5));
    return v;
  }
  VariantInfo v;
  if (!tc->weights.empty()) {
    v = detect_variant_from_shapes(tensor_shapes(tc->weights));
  }
  const std::string& cls = tc->class_name;
  const bool flux1 = cls == "FluxTransformer2DModel";
  const bool flux2 = cls == "Flux2Transformer2DModel";
  const fs::path config_path = tc->folder.empty() ? fs::path() : fs::path(tc->folder) / "config.json";
  if ((flux1 || flux2) && is_file(config_path)) {
    // config.json is what diffusers builds the model from; defaults are the class's own.
    const json cfg = read_json_object(config_path);
    v.family = flux1 ? ModelFamily::Flux1 : ModelFamily::Flux2;
    TransformerShape s;
    s.head_dim = json_int(cfg, "attention_head_dim", 128);
    s.num_heads = json_int(cfg, "num_attention_heads", flux1 ? 24 : 48);
    s.hidden_size = s.head_dim * s.num_heads;
    s.double_blocks = json_int(cfg, "num_layers", flux1 ? 19 : 8);
    s.single_blocks = json_int(cfg, "num_single_layers", flux1 ? 38 : 48);
    s.in_channels = json_int(cfg, "in_channels", flux1 ? 64 : 128);
    s.context_dim = json_int(cfg, "joint_attention_dim", flux1 ? 4096 : 15360);
    s.guidance_embed = json_bool(cfg, "guidance_embeds", !flux1);
    v.shape = s;
  } else if (!cls.empty() && !flux1 && !flux2 && v.family == ModelFamily::Unknown) {
    v.description = fmt::format("not a FLUX transformer (class {})", cls);
    return v;
  }
  if (v.family == ModelFamily::Unknown) return v;
  if (model.is_distilled.has_value()) {
    v.distilled = model.is_distilled;
    v.distilled_from = "model_index.json";
  } else if (model.source == ModelSource::SingleFile) {
    distilled_from_name(v, model.path);
  }
  classify(v);
  return v;
}

}  // namespace fluxrt::io
