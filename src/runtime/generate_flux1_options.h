#pragma once
// The settings of `fluxrt generate` that GenerateJob (generate_job.h) does not carry: FLUX.1
// img2img (--init-image, --strength), FLUX.1 true CFG (--true-cfg with --negative-prompt) and the
// VAE tiling mode of both families (--vae-tiling). Flags or preset keys (run_config.h), merged the
// same way as the rest of the job; validated before any model is loaded, so a bad value, an
// unreadable init image or a flag that does not fit the model family is one Error line and nothing
// is written.
//
//   GenerateJob job = resolve_generate_job(inputs);
//   GenerateFlux1Options extra = resolve_generate_flux1_options(inputs, job);
//   ... load with apply_to(options) ...; extra.apply_to(request);
#include <optional>
#include <string>
#include <vector>

#include "io/image.h"
#include "models/vae/autoencoder_kl.h"
#include "pipelines/flux2_klein_pipeline.h"
#include "runtime/generate_job.h"
#include "runtime/run_config.h"

namespace fluxrt::runtime {

struct GenerateFlux1Options {
  bool flux1 = false;  // the model is a FLUX.1 FluxPipeline folder
  std::string init_image_path;
  std::optional<io::Image> init_image;  // RGB 8-bit, read and checked up front
  std::optional<float> strength;        // unset: the pipeline's default (0.6, FluxImg2ImgPipeline's)
  std::optional<float> true_cfg;        // as given
  // diffusers' do_true_cfg: true_cfg > 1 and a negative prompt was given (even an empty one).
  bool true_cfg_used = false;
  models::TilingMode vae_tiling = models::TilingMode::Auto;
  // Settings given but without effect (as diffusers would ignore them), for the progress output.
  std::vector<std::string> notes;

  // Sets the VAE tiling mode and asks for the VAE encoder when img2img needs it.
  void apply_to(pipelines::PipelineOptions& options) const;
  // Sets init_image, strength and true_cfg_scale (only when used) on the request.
  void apply_to(pipelines::GenerateRequest& request) const;
  // With img2img: the denoising steps that run out of `steps` (diffusers' get_timesteps trimming);
  // InvalidArgument when none would. Without img2img: `steps`.
  int steps_run(int steps, float default_strength) const;
};

// The flags merged over the preset(s) exactly as resolve_generate_job picks them: --config, else
// configs/default.yaml, with configs/demo.yaml over it when no model is named anywhere.
RunConfig merged_generate_config(const GenerateInputs& inputs);

// Validates and resolves the FLUX.1 / VAE settings against the already resolved job (its model
// decides the family). Errors: InvalidArgument (bad value, missing --init-image for --strength,
// FLUX.1-only setting on a FLUX.2-klein model, reference images on FLUX.1), NotFound / Format / Io
// for the init image (naming it).
GenerateFlux1Options resolve_generate_flux1_options(const GenerateInputs& inputs, const GenerateJob& job);

// "auto" / "on" / "off" -> TilingMode; InvalidArgument otherwise.
models::TilingMode parse_vae_tiling(const std::string& text);

}  // namespace fluxrt::runtime
