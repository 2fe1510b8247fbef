#include "runtime/generate_flux1_options.h"

#include <fmt/format.h>

#include <cmath>
#include <system_error>

#include "core/error.h"
#include "pipelines/flux1_pipeline.h"
#include "pipelines/pipeline.h"

namespace fluxrt::runtime {
namespace fs = std::filesystem;

namespace {

fs::path shipped_preset(const char* name) {
  std::error_code ec;
  for (const fs::path& dir : preset_search_dirs())
    if (fs::exists(dir / (std::string(name) + ".yaml"), ec)) return dir / (std::string(name) + ".yaml");
  return {};
}

}  // namespace

models::TilingMode parse_vae_tiling(const std::string& text) {
  if (text == "auto") return models::TilingMode::Auto;
  if (text == "on") return models::TilingMode::Always;
  if (text == "off") return models::TilingMode::Never;
  fail(ErrorCode::InvalidArgument, "--vae-tiling '{}' must be auto, on or off", text);
}

RunConfig merged_generate_config(const GenerateInputs& in) {
  // Keep in step with resolve_generate_job's preset choice (generate_job.cpp).
  RunConfig preset;
  if (in.preset) {
    preset = load_run_config(find_preset(*in.preset));
  } else if (const fs::path file = shipped_preset("default"); !file.empty()) {
    preset = load_run_config(file);
  }
  if (!in.preset && !in.flags.model && !preset.model) {
    if (const fs::path file = shipped_preset("demo"); !file.empty())
      preset = merge_run_config(preset, load_run_config(file));
  }
  return merge_run_config(preset, in.flags);
}

GenerateFlux1Options resolve_generate_flux1_options(const GenerateInputs& in, const GenerateJob& job) {
  const RunConfig cfg = merged_generate_config(in);
  GenerateFlux1Options o;
  // FluxImg2ImgPipeline folders are FLUX.1 too: the registry knows both classes.
  const pipelines::PipelineKind* kind = pipelines::find_pipeline_kind(job.model.pipeline_class);
  o.flux1 = kind != nullptr && kind->family == pipelines::PipelineFamily::Flux1;
  if (cfg.vae_tiling) o.vae_tiling = parse_vae_tiling(*cfg.vae_tiling);

  if (!o.flux1) {
    // One message per setting, naming what to use instead.
    const std::string family = fmt::format("model {} is a FLUX.2-klein pipeline", job.model_label);
    FLUXRT_CHECK(!cfg.init_image, ErrorCode::InvalidArgument,
                 "--init-image is FLUX.1 img2img only; {} (give it reference images with --image)", family);
    FLUXRT_CHECK(!cfg.strength, ErrorCode::InvalidArgument, "--strength is FLUX.1 img2img only; {}", family);
    FLUXRT_CHECK(!cfg.true_cfg, ErrorCode::InvalidArgument,
                 "--true-cfg is FLUX.1 only; {} (base variants use --guidance with --negative-prompt)", family);
    return o;
  }

  FLUXRT_CHECK(job.reference_paths.empty(), ErrorCode::InvalidArgument,
               "FLUX.1 takes no reference images (--image {}); use --init-image for img2img", job.reference_paths[0]);
  if (cfg.strength) {
    const float s = *cfg.strength;
    FLUXRT_CHECK(std::isfinite(s) && s > 0.0f && s <= 1.0f, ErrorCode::InvalidArgument,
                 "--strength {} must be in (0, 1] (1: the init image is fully noised)", s);
    FLUXRT_CHECK(cfg.init_image.has_value(), ErrorCode::InvalidArgument,
                 "--strength {} needs --init-image (it sets how far an init image is noised)", s);
    o.strength = s;
  }
  if (cfg.init_image) {
    o.init_image_path = *cfg.init_image;
    try {
      o.init_image = io::to_rgb(io::read_image(o.init_image_path));
    } catch (const Error& e) {
      // read_image's message names the file already.
      fail(e.code(), "--init-image: {}", e.what());
    }
    if (job.steps) o.steps_run(*job.steps, o.strength.value_or(pipelines::Flux1ModelDefaults{}.img2img_strength));
  }
  if (cfg.true_cfg) {
    const float t = *cfg.true_cfg;
    FLUXRT_CHECK(std::isfinite(t) && t >= 0.0f, ErrorCode::InvalidArgument,
                 "--true-cfg {} must be a non-negative number (> 1 turns true CFG on)", t);
    o.true_cfg = t;
  }
  const bool negative_given = cfg.negative_prompt.has_value();
  o.true_cfg_used = o.true_cfg && *o.true_cfg > 1.0f && negative_given;
  if (o.true_cfg && *o.true_cfg > 1.0f && !negative_given)
    o.notes.push_back(fmt::format("--true-cfg {} has no effect without --negative-prompt (as diffusers)", *o.true_cfg));
  if (negative_given && !o.true_cfg_used)
    o.notes.push_back("--negative-prompt has no effect on FLUX.1 without --true-cfg > 1 (as diffusers)");
  return o;
}

void GenerateFlux1Options::apply_to(pipelines::PipelineOptions& options) const {
  options.vae_tiling.mode = vae_tiling;
  if (init_image) options.load_vae_encoder = true;
}

void GenerateFlux1Options::apply_to(pipelines::GenerateRequest& request) const {
  request.init_image = init_image;
  request.strength.reset();
  if (init_image) request.strength = strength;
  request.true_cfg_scale.reset();
  if (true_cfg_used) request.true_cfg_scale = true_cfg;
}

int GenerateFlux1Options::steps_run(int steps, float default_strength) const {
  if (!init_image) return steps;
  const float s = strength.value_or(default_strength);
  try {
    return steps - pipelines::flux1_img2img_start_index(steps, s);
  } catch (const Error& e) {
    fail(e.code(), "--init-image with --strength {} and {} steps runs no denoising step (raise --strength or --steps)",
         s, steps);
  }
}

}  // namespace fluxrt::runtime
