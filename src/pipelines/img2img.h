#pragma once
// Starting from an image instead of noise, for every family: the strength that trims the schedule
// (diffusers' get_timesteps), the scheduler's scale_noise, the image being edited as the
// pipelines' image processors prepare it, and inpainting's mask (VaeImageProcessor with
// do_binarize and do_convert_grayscale, then the bilinear resize to the packed token grid) with the
// per-step blend that puts the kept region back.
//
//   const int t_start = img2img_start_index(steps, 0.8f);      // the schedule's first step
//   Tensor x = scale_noise(image_latents, noise, sigmas[t_start]);
//   InpaintMask mask = prepare_inpaint_mask(mask_image, width, height, grid_h, grid_w);
//   KeptRegion kept{mask, source_tokens, noise_tokens};         // after each step:
//   loop.after_step = [&](int i, Tensor x) { return kept.after_step(i, x, schedule); };
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/image.h"
#include "pipelines/schedule.h"

namespace fluxrt::pipelines {

// One float rounded to a floating dtype, the way a torch op of that dtype stores its result.
float round_to_dtype(float v, DType dtype);
// InvalidArgument naming `what` unless dtype is f32, bf16 or f16.
void check_elementwise_dtype(DType dtype, const char* what);

// get_timesteps of the img2img and inpaint pipelines: t_start = int(N - min(N * strength, N)) in
// Python doubles. InvalidArgument (field "strength") outside [0, 1] or when no step would run.
int img2img_start_index(int num_steps, float strength);

// FlowMatchEulerDiscreteScheduler.scale_noise at a sigma: sigma * noise + (1 - sigma) * sample with
// sigma and every intermediate in the sample's dtype (scheduler.sigmas.to(sample.dtype)).
Tensor scale_noise(const Tensor& sample, const Tensor& noise, float sigma);

// VaeImageProcessor.preprocess of the image being edited: resized to width x height (PIL Lanczos;
// kept when it already has that size), scaled to [-1, 1]. [1, 3, height, width] f32. A torn image
// is an InvalidArgument naming `what`, with Error::field() `field`.
Tensor preprocess_init_image(const io::Image& image, int width, int height, const char* what = "init image",
                             const char* field = "init_image");

// An inpainting mask at the packed token grid, 1 = repaint, 0 = keep: `period` weights per token
// (raster order), channel c of token t taking weights[t * period + c % period]. klein: one per
// token (its bilinear resize leaves 0.25 steps at the edges); FLUX.1: one per latent pixel of the
// token's 2x2 patch.
struct InpaintMask {
  int64_t grid_h = 0, grid_w = 0, period = 1;
  std::vector<float> weights;  // grid_h * grid_w * period
  bool all_keep() const;
};

// mask_processor.preprocess of the inpaint pipelines: the mask resized to width x height (Lanczos
// on its RGB, as PIL resizes before converting), converted to luminance (PIL's "L"), v / 255
// binarised at 0.5; width * height values in {0, 1}, raster order. The mask must be the size of the
// image being edited (`source_width` x `source_height`): InvalidArgument (field "mask") otherwise.
std::vector<float> binarise_inpaint_mask(const io::Image& mask, int source_width, int source_height,
                                         int width, int height);

// The mask as diffusers' inpaint pipelines read a PIL image: resized to width x height (Lanczos on
// its RGB, as PIL resizes before converting), converted to luminance (PIL's "L"), v / 255 binarised
// at 0.5; then F.interpolate(mode="bilinear", align_corners=False) to grid_h x grid_w. The mask must
// be the size of the image being edited (`source_width` x `source_height`): InvalidArgument
// (field "mask") otherwise.
InpaintMask prepare_inpaint_mask(const io::Image& mask, int source_width, int source_height, int width,
                                 int height, int64_t grid_h, int64_t grid_w);

// FluxInpaintPipeline's mask: binarised as prepare_inpaint_mask, then F.interpolate(mode="nearest")
// to the latent grid latent_h x latent_w (2 x the token grid) and packed as the latents are: each
// token's 2x2 patch, (0,0) (0,1) (1,0) (1,1), repeated over the channels (period 4).
InpaintMask prepare_latent_patch_mask(const io::Image& mask, int source_width, int source_height, int width,
                                      int height, int64_t latent_h, int64_t latent_w);

// (1 - mask) * kept + mask * latents on packed latents [B, grid_h * grid_w, C], each op rounded
// to the latents' dtype as torch computes it with a mask of that dtype; the result on the latents'
// device.
Tensor blend_kept_region(const Tensor& latents, const Tensor& kept, const InpaintMask& mask);

// The inpaint pipelines' step end (RePaint-style): the tokens the mask keeps are put back from the
// image being edited, re-noised to the next step's sigma with the request's noise, and the image's
// own latents after the last step.
struct KeptRegion {
  InpaintMask mask;
  Tensor source;  // [B, L, C] packed latents of the image being edited
  Tensor noise;   // [B, L, C] the packed noise the start latents were made from

  // prepare_latents' start: the source noised to sigma[t_start].
  Tensor start(const Schedule& schedule, int t_start) const;
  // After step i's update: (1 - mask) * (source at sigma[i + 1], or the source after the last
  // step) + mask * latents.
  Tensor after_step(int i, const Tensor& latents, const Schedule& schedule) const;
};

// padding_mask_crop (diffusers' inpaint pipelines with VaeImageProcessor.get_crop_region,
// resize_mode "fill" and apply_overlay): the run sees only a window around the mask, the window
// padded by `pad` pixels and widened (or heightened) to the run's aspect ratio, resized to the
// run's size; after decoding, the result is resized back into the window and blended over the
// original image by the mask. So a small mask on a large image is repainted at full resolution.
struct MaskCrop {
  int x1 = 0, y1 = 0, x2 = 0, y2 = 0;  // the window, [x1, x2) x [y1, y2) in the mask's pixels

  // get_crop_region: the bounding box of the mask's non-zero luminance, padded by `pad` and
  // clamped to the mask, then grown about its centre to width:height (shifted back inside the
  // mask; clamped when the mask is too small). InvalidArgument (field "mask") when the mask has
  // no non-zero pixel: there is nothing to crop to.
  static MaskCrop of_mask(const io::Image& mask, int width, int height, int pad);

  // preprocess(crops_coords=..., resize_mode="fill"): the window cut out and resized (PIL
  // Lanczos) to fit width x height keeping its aspect, centred, the uncovered rows or columns
  // filled from the window's edges as PIL's box resize gives them.
  io::Image crop_and_fill(const io::Image& image, int width, int height) const;

  // How apply_overlay's "crop" resize brings the generated image to the window's size.
  enum class Fit {
    Cover,       // VaeImageProcessor (FLUX.1): resized to cover the window, centre-cropped
    CentreCrop,  // Flux2ImageProcessor (klein): its centre cut out at the window's size, not resized
  };

  // apply_overlay: `generated` brought to the window's size (`fit`), put at the window on a black
  // canvas of the original's size, and the original alpha-composited over it with alpha
  // 255 - luminance(mask), in PIL's 8-bit arithmetic.
  io::Image overlay(const io::Image& original, const io::Image& mask, const io::Image& generated,
                    Fit fit) const;
};

// A request's padding_mask_crop prepared for a run of width x height: the window and the
// request's image and mask (the overlay's inputs), with both cut and resized to the run's size.
struct PreparedMaskCrop {
  MaskCrop window;
  MaskCrop::Fit fit = MaskCrop::Fit::Cover;
  io::Image original, mask;               // as the request gave them
  io::Image cropped_image, cropped_mask;  // width x height
  static std::optional<PreparedMaskCrop> prepare(const std::optional<int>& pad, const io::Image& image,
                                                 const io::Image& mask, int width, int height,
                                                 MaskCrop::Fit fit);
  void overlay_all(std::vector<io::Image>& generated) const;
};

}  // namespace fluxrt::pipelines
