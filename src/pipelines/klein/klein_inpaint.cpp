// Flux2KleinInpaintPipeline's own steps (diffusers 0.42.1 pipeline_flux2_klein_inpaint.py): the
// image and mask preprocessing of __call__ step 2, prepare_latents' start latents, prepare_mask_latents
// (the blend at the end of each step is img2img.h's KeptRegion).
#include "pipelines/klein/klein_inpaint.h"

#include <algorithm>

#include "core/error.h"
#include "pipelines/reference_image.h"

namespace fluxrt::pipelines {

void klein_inpaint_size(int image_width, int image_height, int vae_scale_factor, int* width, int* height) {
  const int multiple = 2 * vae_scale_factor;
  int w = image_width, h = image_height;
  if (static_cast<int64_t>(w) * h > kReferenceTargetArea)
    reference_target_size(image_width, image_height, kReferenceTargetArea, &w, &h);
  *width = std::max(w / multiple * multiple, multiple);
  *height = std::max(h / multiple * multiple, multiple);
}

KleinInpaint KleinInpaint::prepare(const fluxrt::GenerateRequest& request, const fluxrt::RequestPlan& plan,
                                   int vae_scale_factor) {
  FLUXRT_CHECK_FIELD(request.init_image.has_value(), ErrorCode::InvalidArgument, "init_image",
                     "inpainting needs the image being edited (init_image) with its mask");
  FLUXRT_CHECK_FIELD(request.mask_image.has_value(), ErrorCode::InvalidArgument, "mask",
                     "inpainting needs a mask (white = repaint)");
  FLUXRT_CHECK(plan.strength.has_value(), ErrorCode::Internal, "inpaint: the plan has no strength");
  KleinInpaint out;
  out.t_start = img2img_start_index(plan.steps, *plan.strength);
  const io::Image source = image_of_request(*request.init_image, "init image", "init_image");
  const io::Image mask = image_of_request(*request.mask_image, "mask", "mask");
  const int multiple = 2 * vae_scale_factor;
  // 2. the image above 1024^2 pixels is brought down first, then resized to the run's size.
  io::Image sized = source;
  if (static_cast<int64_t>(source.width) * source.height > kReferenceTargetArea) {
    int w = 0, h = 0;
    reference_target_size(source.width, source.height, kReferenceTargetArea, &w, &h);
    sized = resize_lanczos_like_pil(source, w, h);
  }
  if (request.padding_mask_crop) {
    // diffusers cuts the window in the mask's pixels out of the image brought down to 1024^2,
    // then fails pasting the result over it (the sizes differ): refused before that.
    FLUXRT_CHECK_FIELD(sized.width == source.width && sized.height == source.height,
                       ErrorCode::InvalidArgument, "padding_mask_crop",
                       "padding_mask_crop needs an image of at most 1024x1024 pixels ({}x{} is brought down "
                       "first, and its mask would no longer fit it)",
                       source.width, source.height);
    // The window around the mask, at the run's aspect, stands in for the image and the mask.
    // Flux2ImageProcessor's "crop" resize only cuts the centre out: the result goes back unscaled
    // (diffusers 0.42.1 does so; the parity tests hold it to that).
    out.crop = PreparedMaskCrop::prepare(request.padding_mask_crop, source, mask, plan.width, plan.height,
                                         MaskCrop::Fit::CentreCrop);
    out.source_pixels = preprocess_init_image(out.crop->cropped_image, plan.width, plan.height);
    out.kept.mask = prepare_inpaint_mask(out.crop->cropped_mask, plan.width, plan.height, plan.width,
                                         plan.height, plan.height / multiple, plan.width / multiple);
    return out;
  }
  out.source_pixels = preprocess_init_image(sized, plan.width, plan.height);  // [1, 3, H, W]
  // The mask goes from its own size (the source's) straight to the run's size.
  out.kept.mask = prepare_inpaint_mask(mask, source.width, source.height, plan.width, plan.height,
                                       plan.height / multiple, plan.width / multiple);
  return out;
}

}  // namespace fluxrt::pipelines
