#include "runtime/generate_job.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fluxrt/version.h"
#include "io/utf8.h"
#include "pipelines/flux1_pipeline.h"
#include "pipelines/memory_estimate.h"
#include "pipelines/reference_image.h"

namespace fluxrt::runtime {
namespace fs = std::filesystem;

namespace {

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

bool has_qwen_tokenizer(const fs::path& dir) {
  return path_exists(dir / "tokenizer.json") || (path_exists(dir / "vocab.json") && path_exists(dir / "merges.txt"));
}

void check_text(const std::string& text, const std::string& what) {
  size_t bad = 0;
  FLUXRT_CHECK(io::is_valid_utf8(text, &bad), ErrorCode::InvalidArgument, "{} is not valid UTF-8 (byte {})", what,
               bad);
  FLUXRT_CHECK(text.find('\0') == std::string::npos, ErrorCode::InvalidArgument, "{} contains a NUL byte", what);
}

uint64_t random_seed() {
  std::random_device rd;
  // 2^53 - 1 at most: seeds survive a round trip through JSON and JavaScript.
  return ((static_cast<uint64_t>(rd()) << 32) | rd()) & ((uint64_t{1} << 53) - 1);
}

fs::path first_existing(const std::vector<fs::path>& candidates, const std::string& what) {
  std::string looked;
  for (const fs::path& c : candidates) {
    if (c.empty()) continue;
    if (path_exists(c)) return c;
    looked += (looked.empty() ? "" : ", ") + c.string();
  }
  fail(ErrorCode::NotFound, "{} not found (looked in {})", what, looked.empty() ? std::string("nothing") : looked);
}

}  // namespace

fs::path find_bundled_demo_model() {
  const fs::path src = source_tree_dir(), share = install_share_dir();
  std::vector<fs::path> candidates;
  if (!src.empty()) candidates.push_back(src / "models" / "demo" / "model_index.json");
  if (!share.empty()) candidates.push_back(share / "models" / "demo" / "model_index.json");
  try {
    return first_existing(candidates, "no --model given and the bundled demo model").parent_path();
  } catch (const Error& e) {
    fail(ErrorCode::NotFound, "{}; pass --model <folder or hub repo id>", e.what());
  }
}

fs::path find_bundled_qwen_tokenizer() {
  const fs::path src = source_tree_dir(), share = install_share_dir();
  std::vector<fs::path> candidates;
  for (const fs::path& dir : {src / "models" / "demo" / "tokenizer",
                              src / "tests" / "data" / "models" / "flux2-klein-tiny" / "tokenizer",
                              share / "models" / "demo" / "tokenizer"})
    if (!dir.parent_path().empty() && has_qwen_tokenizer(dir)) return dir;
  fail(ErrorCode::NotFound, "no Qwen3 tokenizer found for the synthetic pipeline (looked in {}/models/demo/tokenizer, "
       "{}/tests/data/models/flux2-klein-tiny/tokenizer, {}/models/demo/tokenizer)",
       src.string(), src.string(), share.string());
}

int vae_scale_factor_of(const io::ResolvedModel& model) {
  const io::ModelComponent* vae = model.find("vae");
  const fs::path folder = vae && !vae->folder.empty() ? fs::path(vae->folder) : fs::path(model.path) / "vae";
  const fs::path config = folder / "config.json";
  if (model.source != io::ModelSource::PipelineFolder || !path_exists(config)) return 8;
  std::ifstream in(config, std::ios::binary);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  FLUXRT_CHECK(!j.is_discarded() && j.is_object(), ErrorCode::Format, "{}: not a JSON object", config.string());
  if (!j.contains("block_out_channels")) return 8;  // the class default: 4 levels
  const nlohmann::json& levels = j["block_out_channels"];
  FLUXRT_CHECK(levels.is_array() && !levels.empty() && levels.size() <= 7, ErrorCode::Format,
               "{}: block_out_channels must be a list of 1 to 7 levels", config.string());
  return 1 << (static_cast<int>(levels.size()) - 1);
}

const pipelines::PipelineKind& check_pipeline_folder(const io::ResolvedModel& model,
                                                     bool transformer_from_file,
                                                     bool text_encoder_from_file) {
  return pipelines::check_pipeline_folder(model, transformer_from_file, text_encoder_from_file);
}

io::ResolvedModel find_components_folder(const io::ResolvedModel& file, const std::optional<std::string>& components) {
  const pipelines::VariantInfo info = pipelines::detect_variant(file);
  const pipelines::PipelineKind* kind = pipelines::pipeline_kind_for_transformer(info);
  FLUXRT_CHECK(
      kind != nullptr, ErrorCode::Unsupported,
      "model {} is {}: fluxrt generate takes FLUX.2 klein and FLUX.1 transformer files", file.path,
      info.description.empty() ? std::string("not a FLUX transformer checkpoint") : info.description);
  io::ResolvedModel folder;
  if (components) {
    folder = io::resolve_model(*components);
    FLUXRT_CHECK(folder.source == io::ModelSource::PipelineFolder, ErrorCode::InvalidArgument,
                 "--components {}: not a diffusers pipeline folder (no model_index.json)", *components);
  } else {
    fs::path dir = fs::path(file.path).parent_path();
    for (int up = 0; up < 2 && !dir.empty(); ++up, dir = dir.parent_path()) {
      if (path_exists(dir / "model_index.json")) {
        folder = io::resolve_model(dir.string());
        break;
      }
    }
    FLUXRT_CHECK(
        !folder.path.empty(), ErrorCode::NotFound,
        "model {} is a single {} transformer file: pass --components <a diffusers {} folder or hub repo id> "
        "for its text encoder, tokenizer, VAE and scheduler (no model_index.json next to the file)",
        file.path, kind->name, kind->pipeline_class);
  }
  FLUXRT_CHECK(
      kind->accepts_class(folder.pipeline_class), ErrorCode::Unsupported,
      "model {} is a {} transformer but the components in {} are a {}: they must be a {} folder", file.path,
      info.description, folder.path,
      folder.pipeline_class.empty() ? std::string("pipeline without a _class_name") : folder.pipeline_class,
      kind->pipeline_class);
  return folder;
}

std::vector<std::string> read_prompts_file(const fs::path& file) {
  std::error_code ec;
  FLUXRT_CHECK(fs::is_regular_file(file, ec), ErrorCode::NotFound, "prompts file {} not found", file.string());
  std::ifstream in(file, std::ios::binary);
  FLUXRT_CHECK(in.good(), ErrorCode::Io, "cannot read prompts file {}", file.string());
  std::vector<std::string> prompts;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    check_text(line, fmt::format("{}:{}", file.string(), number));
    prompts.push_back(line);
  }
  FLUXRT_CHECK(!in.bad(), ErrorCode::Io, "cannot read prompts file {}", file.string());
  FLUXRT_CHECK(!prompts.empty(), ErrorCode::InvalidArgument, "prompts file {} holds no prompt (one per line)",
               file.string());
  return prompts;
}

void check_output_dir_writable(const fs::path& dir) {
  FLUXRT_CHECK(!dir.empty(), ErrorCode::InvalidArgument, "--out: empty folder name");
  std::error_code ec;
  fs::path probe = fs::absolute(dir, ec);
  if (ec) probe = dir;
  // The folder itself, or the nearest ancestor that exists (the folder is created at write time).
  while (!path_exists(probe) && probe.has_parent_path() && probe.parent_path() != probe) probe = probe.parent_path();
  FLUXRT_CHECK(fs::is_directory(probe, ec), ErrorCode::Io, "output folder {}: {} is not a folder", dir.string(),
               probe.string());
  FLUXRT_CHECK(::access(probe.c_str(), W_OK | X_OK) == 0, ErrorCode::Io, "output folder {}: {} is not writable ({})",
               dir.string(), probe.string(), std::strerror(errno));
}

std::string format_output_name(const std::string& pattern, const OutputNameFields& f) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '{') {
      FLUXRT_CHECK(pattern[i] != '}', ErrorCode::InvalidArgument, "file name pattern '{}': unmatched '}}'", pattern);
      out += pattern[i];
      continue;
    }
    const size_t close = pattern.find('}', i);
    FLUXRT_CHECK(close != std::string::npos, ErrorCode::InvalidArgument, "file name pattern '{}': unclosed '{{'",
                 pattern);
    const std::string key = pattern.substr(i + 1, close - i - 1);
    if (key == "seed") out += std::to_string(f.seed);
    else if (key == "index") out += std::to_string(f.index);
    else if (key == "prompt_index") out += std::to_string(f.prompt_index);
    else if (key == "image_index") out += std::to_string(f.image_index);
    else if (key == "width") out += std::to_string(f.width);
    else if (key == "height") out += std::to_string(f.height);
    else if (key == "steps") out += std::to_string(f.steps);
    else
      fail(ErrorCode::InvalidArgument,
           "file name pattern '{}': unknown placeholder {{{}}} (known: seed, index, prompt_index, image_index, width, "
           "height, steps)",
           pattern, key);
    i = close;
  }
  FLUXRT_CHECK(out.find('/') == std::string::npos && out.find('\0') == std::string::npos, ErrorCode::InvalidArgument,
               "file name pattern '{}' must be a file name, not a path (use --out for the folder)", pattern);
  if (out.size() < 4 || out.compare(out.size() - 4, 4, ".png") != 0) out += ".png";
  FLUXRT_CHECK(out != ".png" && out[0] != '.', ErrorCode::InvalidArgument,
               "file name pattern '{}' gives a hidden or empty name '{}'", pattern, out);
  return out;
}

fs::path reserve_output_path(const fs::path& dir, const std::string& name) {
  const std::string stem = name.substr(0, name.size() - 4), ext = ".png";
  for (int attempt = 0; attempt < 100000; ++attempt) {
    const fs::path candidate = dir / (attempt == 0 ? name : fmt::format("{}-{}{}", stem, attempt, ext));
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      return candidate;
    }
    FLUXRT_CHECK(errno == EEXIST, ErrorCode::Io, "cannot create {}: {}", candidate.string(), std::strerror(errno));
  }
  fail(ErrorCode::Io, "no free file name for {} in {}", name, dir.string());
}

ResolvedPipeline resolve_pipeline(const std::string& spec, const std::optional<std::string>& components,
                                  const std::optional<std::string>& text_encoder) {
  ResolvedPipeline r;
  if (text_encoder) {
    std::error_code ec;
    FLUXRT_CHECK(fs::is_regular_file(*text_encoder, ec), ErrorCode::NotFound,
                 "--text-encoder {}: not found (a .gguf or .safetensors text encoder file)", *text_encoder);
    r.text_encoder_file = *text_encoder;
  }
  r.given = io::resolve_model(spec);
  if (r.given.source == io::ModelSource::SingleFile) {
    r.transformer_file = r.given.path;
    r.model = find_components_folder(r.given, components);
    r.kind = &check_pipeline_folder(r.model, /*transformer_from_file=*/true, text_encoder.has_value());
  } else {
    FLUXRT_CHECK(!components, ErrorCode::InvalidArgument,
                 "--components goes with --model FILE (a single transformer checkpoint); {} is a folder",
                 spec);
    r.model = r.given;
    r.kind = &check_pipeline_folder(r.model, /*transformer_from_file=*/false, text_encoder.has_value());
  }
  return r;
}

std::string variant_label(const ResolvedPipeline& pipeline) {
  try {
    // A transformer file runs with its components folder, whose model_index.json it is named by.
    const pipelines::VariantInfo v = pipeline.transformer_file.empty()
                                         ? pipelines::detect_variant(pipeline.model)
                                         : pipelines::detect_variant(pipeline.given, &pipeline.model);
    return !v.description.empty() ? v.description : !v.variant.empty() ? v.variant : std::string("unknown");
  } catch (const Error&) {
    return pipeline.model.pipeline_class;  // detection is informational; the load validates for real
  }
}

void reference_run_size(int image_width, int image_height, int vae_scale_factor, int* width, int* height) {
  const int multiple = 2 * vae_scale_factor;
  int w = image_width, h = image_height;
  if (static_cast<int64_t>(w) * h > pipelines::kReferenceTargetArea)
    pipelines::reference_target_size(image_width, image_height, pipelines::kReferenceTargetArea, &w, &h);
  *width = std::max(w / multiple * multiple, multiple);
  *height = std::max(h / multiple * multiple, multiple);
}

void check_run_size(const ResolvedPipeline& pipeline, int width, int height, int images, int vae_scale_factor,
                    const pipelines::MemoryCheck& memory) {
  pipeline.kind->validate_size(width, height, images, vae_scale_factor, memory);
}

GenerateJob resolve_generate_job(const GenerateInputs& in) {
  RunConfig preset;
  GenerateJob job;
  auto shipped_preset = [](const char* name) {
    for (const fs::path& dir : preset_search_dirs())
      if (path_exists(dir / (std::string(name) + ".yaml"))) return dir / (std::string(name) + ".yaml");
    return fs::path();
  };
  if (in.preset) {
    const fs::path file = find_preset(*in.preset);
    preset = load_run_config(file);
    job.preset_file = file.string();
  } else if (const fs::path file = shipped_preset("default"); !file.empty()) {
    // Without --config, default.yaml applies when one is shipped; none is fine.
    preset = load_run_config(file);
    job.preset_file = file.string();
  }
  if (!in.preset && !in.flags.model && !preset.model) {
    // Falling back to the bundled demo model: its own preset (64x64, its steps) goes over
    // default.yaml, since the model's built-in 1024x1024 default is far outside what it learned.
    if (const fs::path file = shipped_preset("demo"); !file.empty()) {
      preset = merge_run_config(preset, load_run_config(file));
      job.preset_file = file.string();
    }
  }
  const RunConfig cfg = merge_run_config(preset, in.flags);

  // Prompts: --prompt, else --prompts-file, else the preset's.
  FLUXRT_CHECK(!(in.prompt && in.prompts_file), ErrorCode::InvalidArgument,
               "give either --prompt or --prompts-file, not both");
  if (in.prompt) {
    job.prompts = {*in.prompt};
  } else if (in.prompts_file) {
    job.prompts = read_prompts_file(*in.prompts_file);
  } else if (cfg.prompts) {
    job.prompts = *cfg.prompts;
  } else {
    fail(ErrorCode::InvalidArgument, "no prompt: give --prompt \"...\" (may be empty), --prompts-file or prompts: in a preset");
  }
  for (size_t i = 0; i < job.prompts.size(); ++i)
    check_text(job.prompts[i], job.prompts.size() == 1 ? "the prompt" : fmt::format("prompt {}", i + 1));
  job.negative_prompt = cfg.negative_prompt.value_or("");
  check_text(job.negative_prompt, "the negative prompt");
  job.images_per_prompt = cfg.batch.value_or(1);
  FLUXRT_CHECK(job.images_per_prompt >= 1 && job.images_per_prompt <= 256, ErrorCode::InvalidArgument,
               "--batch {} must be in [1, 256]", job.images_per_prompt);
  FLUXRT_CHECK(job.total_images() <= 1024, ErrorCode::InvalidArgument,
               "{} prompts x {} images is more than 1024 images in one run", job.prompts.size(), job.images_per_prompt);

  job.steps = cfg.steps;
  if (job.steps) FLUXRT_CHECK(*job.steps >= 1 && *job.steps <= 1000, ErrorCode::InvalidArgument, "--steps {} must be in [1, 1000]", *job.steps);
  job.guidance = cfg.guidance;
  if (job.guidance)
    FLUXRT_CHECK(std::isfinite(*job.guidance) && *job.guidance >= 0, ErrorCode::InvalidArgument,
                 "--guidance {} must be a non-negative number", *job.guidance);
  job.max_sequence_length = cfg.max_sequence_length;
  if (job.max_sequence_length)
    FLUXRT_CHECK(*job.max_sequence_length >= 1 && *job.max_sequence_length <= 512, ErrorCode::InvalidArgument,
                 "--max-sequence-length {} must be in [1, 512]", *job.max_sequence_length);
  if (cfg.seed) {
    job.seed = *cfg.seed;
  } else {
    job.seed = random_seed();
    job.seed_was_random = true;
  }
  job.dtype = cfg.dtype.value_or("bf16") == "f32" ? DType::F32 : DType::BF16;
  FLUXRT_CHECK(!cfg.dtype || *cfg.dtype == "bf16" || *cfg.dtype == "f32", ErrorCode::InvalidArgument,
               "--dtype '{}' must be bf16 or f32", *cfg.dtype);
  job.device = Device::parse(cfg.device.value_or("cpu"));
  job.threads = cfg.threads;
  if (job.threads) FLUXRT_CHECK(*job.threads >= 0, ErrorCode::InvalidArgument, "--threads must be >= 0");
  job.low_memory = cfg.low_memory.value_or(false);

  // Size: checked once the model (its VAE factor) is known; otherwise it comes from a reference
  // image or the model.
  job.width = cfg.width;
  job.height = cfg.height;

  job.reference_paths = in.reference_paths;
  for (const std::string& path : in.reference_paths)
    job.reference_images.push_back(io::to_rgb(io::read_image(path)));

  job.out_dir = cfg.out_dir.value_or(kDefaultOutDir);
  check_output_dir_writable(job.out_dir);
  job.filename_pattern = cfg.filename_pattern.value_or(kDefaultFilenamePattern);
  format_output_name(job.filename_pattern, {});  // reject a bad pattern before the run

  if (cfg.loras)
    for (const RunConfig::LoraEntry& l : *cfg.loras) {
      std::error_code ec;
      FLUXRT_CHECK(fs::is_regular_file(l.path, ec), ErrorCode::NotFound, "LoRA file {} not found", l.path);
      job.loras.push_back(l);
    }

  // The model last: the most expensive check, and the bundled demo only when nothing else says.
  if (cfg.model) {
    job.model_label = *cfg.model;
  } else {
    job.model_label = find_bundled_demo_model().string();
  }
  const ResolvedPipeline pipeline = resolve_pipeline(job.model_label, in.components, in.text_encoder);
  job.model = pipeline.model;
  job.transformer_file = pipeline.transformer_file;
  job.text_encoder_file = pipeline.text_encoder_file;
  job.vae_scale_factor = vae_scale_factor_of(job.model);
  // Size and memory before anything is loaded: the size the run will have (given, else the first
  // reference image's as the klein pipeline crops it, else the pipelines' default 128 x factor),
  // its activations plus the weights resident at the same time.
  const pipelines::ResidentWeights weights = pipelines::pipeline_weight_bytes(
      job.model.path, job.dtype, job.transformer_file, job.text_encoder_file);
  int width = 128 * job.vae_scale_factor, height = width;
  if (!job.reference_images.empty()) {
    const io::Image& first = job.reference_images.front();
    reference_run_size(first.width, first.height, job.vae_scale_factor, &width, &height);
  }
  width = job.width.value_or(width);
  height = job.height.value_or(height);
  auto check_size = [&](bool low_memory) {
    check_run_size(pipeline, width, height, job.total_images(), job.vae_scale_factor,
                   pipelines::MemoryCheck{weights.peak(low_memory), in.ram_limit_bytes, !low_memory});
  };
  try {
    check_size(job.low_memory);
  } catch (const Error& e) {
    // A model whose components do not fit together (klein-9B, FLUX.1 with T5-XXL on 24 GiB) runs
    // one component at a time rather than failing, unless low_memory was set to false explicitly.
    if (e.code() != ErrorCode::OutOfMemory || job.low_memory || cfg.low_memory.has_value()) throw;
    check_size(true);  // throws when even one component at a time does not fit
    job.low_memory = true;
    job.low_memory_note = fmt::format(
        "the components need {:.1f} GiB of weights together, more than this machine has: running in low-memory "
        "mode (one component resident at a time; --low-memory to ask for it, low_memory: false in a preset to refuse)",
        static_cast<double>(weights.peak(false)) / 1073741824.0);
  }
  job.resident_weight_bytes = weights.peak(job.low_memory);
  job.variant = variant_label(pipeline);
  return job;
}

pipelines::GenerateRequest make_generate_request(const GenerateJob& job) {
  pipelines::GenerateRequest r;
  r.prompts = job.prompts;
  r.negative_prompt = job.negative_prompt;
  r.images_per_prompt = job.images_per_prompt;
  r.width = job.width;
  r.height = job.height;
  r.num_steps = job.steps;
  r.guidance_scale = job.guidance;
  r.max_sequence_length = job.max_sequence_length;
  r.seed = job.seed;
  r.reference_images = job.reference_images;
  return r;
}

std::vector<fs::path> write_numbered_pngs(
    const fs::path& dir, const std::string& pattern, const OutputNameFields& run, int images_per_prompt,
    size_t count, const std::function<void(size_t index, const fs::path& path)>& write) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  FLUXRT_CHECK(!ec && fs::is_directory(dir, ec), ErrorCode::Io, "cannot create output folder {}: {}",
               dir.string(), ec.message());
  std::vector<fs::path> written;
  for (size_t i = 0; i < count; ++i) {
    OutputNameFields f = run;
    f.index = static_cast<int>(i);
    f.prompt_index = f.index / images_per_prompt;
    f.image_index = f.index % images_per_prompt;
    const fs::path path = reserve_output_path(dir, format_output_name(pattern, f));
    try {
      write(i, path);
    } catch (...) {
      fs::remove(path, ec);  // the empty placeholder
      throw;
    }
    written.push_back(path);
  }
  return written;
}

}  // namespace fluxrt::runtime
