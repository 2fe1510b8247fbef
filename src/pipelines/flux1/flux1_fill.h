#pragma once
// FLUX.1 Fill: what diffusers 0.42.1 FluxFillPipeline adds to a FLUX.1 img2img call
// (Flux1Pipeline::generate runs it on a FluxFillPipeline folder). The transformer is conditioned,
// at every step, on the image being edited with the repainted region blanked and on the mask
// itself: its input is the packed latents concatenated on the channels with
//   the masked image's latents   init_image * (1 - mask), VAE-encoded (a posterior sample drawn
//                                after the noise), (z - shift) * scale, packed: [B, N, 64]
//   the mask                     binarised at the output size, each latent pixel's f x f mask
//                                pixels (f: the VAE factor) as channels, packed: [B, N, 4 f^2]
// so 64 + 64 + 256 = 384 channels for the released model. Nothing is blended after a step: the
// transformer repaints. `strength` (default 1) still starts from the source noised as img2img.
//
//   Flux1FillCondition fill = Flux1FillCondition::prepare(init_pixels, mask, 1024, 768, 1024, 768, 8);
//   Tensor masked = encode(fill.masked_pixels);                        // [1, 16, h, w], scaled
//   Tensor condition = fill.condition(masked, batch, dtype);           // [B, N, 64 + 256]
//   model.input = [&](const Tensor& x) { return ops::concat({x, condition}, 2); };
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/image.h"

namespace fluxrt::pipelines {

// FLUX.1-Fill-dev's transformer input: the packed latents (4 x 16 channels), the packed masked
// image latents (the same) and the packed 8x8 mask pixels of each latent pixel (4 x 64).
inline constexpr int64_t kFlux1FillInChannels = 4 * 16 + 4 * 16 + 4 * 8 * 8;

// FluxFillPipeline.__call__'s defaults.
inline constexpr int kFlux1FillSteps = 50;
inline constexpr float kFlux1FillGuidance = 30.0f;
inline constexpr float kFlux1FillStrength = 1.0f;

struct Flux1FillCondition {
  Tensor masked_pixels;  // [1, 3, H, W] f32: the preprocessed image with the repainted pixels at 0
  Tensor mask_tokens;    // [1, N, 4 f^2] f32 in {0, 1}: prepare_mask_latents' packed mask

  // `source_pixels` [1, 3, H, W] f32 in [-1, 1] (preprocess_init_image at the output size), the
  // request's mask (the size of the image being edited, source_width x source_height: InvalidArgument
  // naming "mask" otherwise), binarised at width x height (binarise_inpaint_mask).
  static Flux1FillCondition prepare(const Tensor& source_pixels, const io::Image& mask, int source_width,
                                    int source_height, int width, int height, int vae_scale_factor);

  // torch.cat((masked_image_latents, mask), dim=-1) for B images: the packed masked-image latents
  // (`masked_latents` [1, C, h, w], scaled) and the mask in `dtype`, [B, N, 4C + 4 f^2], on the
  // latents' device.
  Tensor condition(const Tensor& masked_latents, int64_t batch, DType dtype) const;
};

// prepare_mask_latents' mask packing: the binarised mask [height, width] (raster order) viewed as
// [h, f, w, f] (h = height / f), permuted to [f, f, h, w] (f^2 channels per latent pixel, dy * f +
// dx), then packed as the latents: [1, (h/2)(w/2), 4 f^2] f32.
Tensor flux1_fill_mask_tokens(const std::vector<float>& mask, int width, int height, int vae_scale_factor);

}  // namespace fluxrt::pipelines
