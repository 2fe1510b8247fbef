#pragma once
// FLUX.2-klein inpainting: what diffusers 0.42.1 Flux2KleinInpaintPipeline adds to a klein call
// (Flux2KleinPipeline::generate runs it when the request has a mask). The image being edited
// (GenerateRequest::init_image) sets the size (brought down to 1024^2 pixels when larger, floored
// to multiples of 2 x the VAE factor), is VAE-encoded once and used twice: noised to the first
// sigma of the schedule's tail that `strength` keeps (scale_noise) as the start latents, and as the
// first in-context reference (t = 10; extra reference images follow at 20, 30, ...). The mask
// (white = repaint) is binarised, resized to the packed token grid, and after every step the kept
// tokens are replaced by the source latents re-noised to the next sigma (RePaint-style), by the
// source itself after the last step.
//
//   KleinInpaint inpaint = KleinInpaint::prepare(request, plan, vae_scale_factor);  // no weights
//   inpaint.kept.source = ...;   // [B, L, 128] the encoded source, packed (the pipeline's VAE)
//   inpaint.kept.noise = noise;  // [B, L, 128] the packed noise
//   Tensor latents = inpaint.kept.start(schedule, inpaint.t_start);
//   loop.first_step = inpaint.t_start;
//   loop.after_step = [&](int i, Tensor x) { return inpaint.kept.after_step(i, x, schedule); };
#include <optional>

#include "core/tensor.h"
#include "fluxrt/request.h"
#include "pipelines/img2img.h"
#include "pipelines/schedule.h"

namespace fluxrt::pipelines {

// Flux2KleinInpaintPipeline.__call__'s default strength.
inline constexpr float kKleinInpaintStrength = 0.8f;

// The output size an inpainting request takes when it gives none: the image's, scaled to an area
// of 1024^2 when larger (sides truncated), floored to multiples of 2 x vae_scale_factor.
void klein_inpaint_size(int image_width, int image_height, int vae_scale_factor, int* width, int* height);

struct KleinInpaint {
  int t_start = 0;       // the first schedule step that runs
  Tensor source_pixels;  // [1, 3, H, W] f32 in [-1, 1]: the image being edited at the run's size
  // Its mask per packed token (1 = repaint, 0 = keep); the pipeline sets its source (packed,
  // BN-normalised source latents) and noise, [B, L, 128] each.
  KeptRegion kept;
  // padding_mask_crop: the window the run repaints and what the overlay needs (img2img.h).
  std::optional<PreparedMaskCrop> crop;

  // Checks and preprocesses the request's image and mask for the plan's size (InvalidArgument
  // naming "init_image" or "mask"), before any weight is used.
  static KleinInpaint prepare(const fluxrt::GenerateRequest& request, const fluxrt::RequestPlan& plan,
                              int vae_scale_factor);
};

}  // namespace fluxrt::pipelines
