// The public fluxrt::resolve_run / write_run_images (include/fluxrt/run.h): the settings become
// the GenerateInputs that resolve_generate_job and resolve_generate_flux1_options check, and
// their job becomes the engine options and the request.
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "fluxrt/run.h"
#include "io/public_image.h"
#include "runtime/generate_flux1_options.h"
#include "runtime/generate_job.h"
#include "runtime/run_config.h"
#include "runtime/timing_report.h"

namespace fluxrt {
namespace fs = std::filesystem;

namespace {

runtime::GenerateInputs inputs_from(const RunSettings& s) {
  runtime::GenerateInputs in;
  runtime::RunConfig& f = in.flags;
  f.model = s.model;
  in.components = s.components;
  in.text_encoder = s.text_encoder;
  if (s.size) {
    int w = 0, h = 0;
    runtime::parse_size(*s.size, "--size", &w, &h);
    f.width = w;
    f.height = h;
  }
  f.steps = s.steps;
  f.guidance = s.guidance;
  f.seed = s.seed;
  f.max_sequence_length = s.max_sequence_length;
  f.dtype = s.dtype;
  f.device = s.device;
  f.threads = s.threads;
  f.low_memory = s.low_memory;
  f.batch = s.images_per_prompt;
  f.out_dir = s.out_dir;
  f.filename_pattern = s.filename_pattern;
  f.negative_prompt = s.negative_prompt;
  f.init_image = s.init_image;
  f.strength = s.strength;
  f.true_cfg = s.true_cfg;
  f.vae_tiling = s.vae_tiling;
  if (!s.loras.empty()) {
    f.loras.emplace();
    for (const std::string& text : s.loras) f.loras->push_back(runtime::parse_lora_flag(text));
  }
  in.preset = s.preset;
  in.prompt = s.prompt;
  in.prompts_file = s.prompts_file;
  in.reference_paths = s.reference_images;
  return in;
}

VaeTiling public_tiling(models::TilingMode mode) {
  if (mode == models::TilingMode::Always) return VaeTiling::On;
  if (mode == models::TilingMode::Never) return VaeTiling::Off;
  return VaeTiling::Auto;
}

}  // namespace

Run resolve_run(const RunSettings& settings) {
  const runtime::GenerateInputs in = inputs_from(settings);
  const runtime::GenerateJob job = runtime::resolve_generate_job(in);
  const runtime::GenerateFlux1Options extra = runtime::resolve_generate_flux1_options(in, job);
  if (settings.profile) {
    const fs::path profile(*settings.profile);
    runtime::check_output_dir_writable(profile.has_parent_path() ? profile.parent_path() : ".");
    std::error_code ec;
    FLUXRT_CHECK(!fs::is_directory(profile, ec), ErrorCode::InvalidArgument,
                 "--profile {} is a folder; give a file name", *settings.profile);
  }

  Run run;
  run.model = job.model_label;
  run.variant = job.variant;
  run.preset = job.preset_file;
  run.seed_was_random = job.seed_was_random;
  run.out_dir = job.out_dir.string();
  run.filename_pattern = job.filename_pattern;

  EngineOptions& e = run.engine;
  e.device = job.device.str();
  e.precision = job.dtype == DType::F32 ? Precision::F32 : Precision::BF16;
  e.threads = job.threads;
  e.low_memory = job.low_memory;
  e.vae_tiling = public_tiling(extra.vae_tiling);
  // The encoder only when this run needs it: its weights and load time otherwise.
  e.vae_encoder = !job.reference_images.empty() || extra.init_image.has_value();
  e.cuda_graphs = settings.cuda_graphs;
  e.components = settings.components;
  e.text_encoder = settings.text_encoder;
  for (const runtime::RunConfig::LoraEntry& l : job.loras) e.loras.push_back({l.path, l.strength});

  GenerateRequest& r = run.request;
  r.prompts = job.prompts;
  r.negative_prompt = job.negative_prompt;
  r.images_per_prompt = job.images_per_prompt;
  r.width = job.width;
  r.height = job.height;
  r.steps = job.steps;
  r.guidance = job.guidance;
  r.max_sequence_length = job.max_sequence_length;
  r.seed = job.seed;
  for (size_t i = 0; i < job.reference_images.size(); ++i) {
    r.reference_images.push_back(io::to_public(job.reference_images[i]));
    r.reference_image_names.push_back(fs::path(job.reference_paths[i]).filename().string());
  }
  if (extra.init_image) {
    r.init_image = io::to_public(*extra.init_image);
    r.init_image_name = fs::path(extra.init_image_path).filename().string();
    r.strength = extra.strength;
    run.init_image = extra.init_image_path;
  }
  // diffusers runs true CFG only with a negative prompt given (even an empty one).
  if (extra.true_cfg_used) r.true_cfg = extra.true_cfg;

  run.notes = extra.notes;
  if (!job.low_memory_note.empty()) run.notes.push_back(job.low_memory_note);
  if (settings.cuda_graphs && job.device == Device::cpu())
    run.notes.push_back("--cuda-graphs has no effect on the CPU");
  return run;
}

std::vector<std::string> write_run_images(const Run& run, const GenerateResult& result) {
  runtime::OutputNameFields fields;
  fields.seed = run.request.seed;
  fields.width = result.width;
  fields.height = result.height;
  fields.steps = result.steps;
  const std::vector<fs::path> paths = runtime::write_numbered_pngs(
      run.out_dir, run.filename_pattern, fields, run.request.images_per_prompt, result.images.size(),
      [&](size_t i, const fs::path& path) {
        write_png(path.string(), result.images[i].image, metadata_text(result.images[i].metadata));
      });
  std::vector<std::string> out;
  for (const fs::path& p : paths) out.push_back(p.string());
  return out;
}

void write_text_file(const std::string& path, const std::string& contents) {
  runtime::write_file_atomically(path, contents);
}

}  // namespace fluxrt
