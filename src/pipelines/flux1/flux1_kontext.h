#pragma once
// FLUX.1 Kontext: what diffusers 0.42.1 FluxKontextPipeline adds to a FLUX.1 text-to-image call
// (Flux1Pipeline::generate runs it on a FluxKontextPipeline folder). The image being edited (the
// request's one reference image) is resized to the preferred Kontext resolution nearest its aspect
// ratio, VAE-encoded (the posterior mode: no draw from the generator), (z - shift) * scale, packed,
// and appended after the noise tokens with ids (1, i, j) where the noise tokens have (0, i, j);
// only the noise tokens' velocities are used. The schedule's shift counts the noise tokens only.
//
//   Tensor pixels = kontext_preprocess_image(image, 16);            // [1, 3, 1024, 1024] for a square
//   Tensor tokens = flux1_pack_latents(vae.encode_latents(pixels));  // [1, Nr, 64]
//   Tensor ids = ops::concat({flux1_image_ids(h, w), flux1_image_ids(hr, wr, 1)}, 0);
//   model.input = [&](const Tensor& x) { return ops::concat({x, tokens}, 1); };
#include <cstdint>

#include "core/tensor.h"
#include "io/image.h"

namespace fluxrt::pipelines {

// The size FluxKontextPipeline brings the image being edited to (its default _auto_resize): the
// image's sides floored to multiples of `multiple_of` (2 x the VAE factor), the entry of
// PREFERRED_KONTEXT_RESOLUTIONS nearest that aspect ratio (ties to the narrower), floored the same
// way. InvalidArgument (field "reference_images") when a side is below `multiple_of`.
void kontext_image_size(int width, int height, int multiple_of, int* out_width, int* out_height);

// The output size FluxKontextPipeline makes of width x height for `max_area` (its __call__ step 1):
// the aspect ratio kept, each side round(sqrt(max_area x aspect)) (Python's round, ties to even),
// floored to `multiple_of`. InvalidArgument (field "max_area") when a side comes out below it.
void kontext_output_size(int width, int height, int64_t max_area, int multiple_of, int* out_width,
                         int* out_height);

// image_processor.resize (PIL Lanczos) to kontext_image_size, then preprocess: [1, 3, h, w] f32 in
// [-1, 1].
Tensor kontext_preprocess_image(const io::Image& image, int multiple_of);

}  // namespace fluxrt::pipelines
