#pragma once
// Reference-image preprocessing of Flux2KleinPipeline (diffusers 0.42 __call__ step 4 with
// Flux2ImageProcessor) and the PIL Lanczos resampling it relies on.
//
// diffusers works on PIL images, so the exact semantics are PIL's: Image.resize(LANCZOS) is a
// separable two-pass filter (horizontal first, vertical first when the height loses more than
// twice as many pixels as the width, since Pillow 13) in 22-bit fixed point with the
// intermediate rows rounded and clipped to 8 bits; RGBA images are resized with premultiplied alpha ("RGBa")
// and un-premultiplied afterwards. resize_lanczos_like_pil reproduces that arithmetic, so results equal PIL's
// except where a coefficient's double rounding lands on the other side of .5.
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "fluxrt/image.h"
#include "io/image.h"

namespace fluxrt::pipelines {

// The area reference images are brought down to when larger (diffusers: 1024 * 1024 pixels).
inline constexpr int64_t kReferenceTargetArea = int64_t{1024} * 1024;
// Flux2ImageProcessor.check_image_input limits.
inline constexpr int kReferenceMinSide = 64;
inline constexpr int kReferenceMaxAspect = 8;

// PIL Image.resize((width, height), Image.LANCZOS) on an 8-bit image of 1, 3 or 4 channels
// (4 = RGBA: premultiplied while filtering, as PIL does). InvalidArgument on empty sizes.
io::Image resize_lanczos_like_pil(const io::Image& image, int width, int height);

// The source rectangle PIL's resize(box=...) samples, in pixels (floats, as PIL takes them).
struct PilBox {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};
enum class PilFilter { Lanczos, Bicubic };  // Bicubic: Image.resize's default resample
// Image.resize((width, height), filter, box=box). An empty span (x0 == x1) is what
// VaeImageProcessor's "fill" mode uses for its edge bands (with the default bicubic): every output
// column is the filter centred at x0. The pass order is the whole-image rule's (exact where only
// one pass runs).
io::Image resize_like_pil(const io::Image& image, int width, int height, const PilBox& box,
                          PilFilter filter = PilFilter::Lanczos);

// Flux2ImageProcessor._resize_to_target_area: scale = sqrt(area / (w * h)), sides truncated.
void reference_target_size(int width, int height, int64_t target_area, int* out_width, int* out_height);

// Flux2ImageProcessor.check_image_input: InvalidArgument (one line, naming `what`) when a side is
// below 64 pixels or the aspect ratio exceeds 8:1.
void check_reference_image(const io::Image& image, const char* what = "reference image");

// Flux2ImageProcessor preprocessing of a reference image: RGB, resized (Lanczos) to an area of at
// most 1024^2 keeping the aspect ratio when larger, both sides floored to multiples of
// `multiple_of` (the pipeline's vae_scale_factor * 2: 16 for the released VAEs) and centre-cropped
// to that size, scaled to [-1, 1]. Returns [1, 3, h, w] f32.
Tensor preprocess_reference_image(const io::Image& image, int multiple_of = 16);

// A request's image (fluxrt::Image, RGB 8-bit) as the pipelines read it. A torn buffer is the
// request at fault: InvalidArgument naming `what`, with Error::field() `field`.
io::Image image_of_request(const fluxrt::Image& image, const std::string& what, const char* field);

}  // namespace fluxrt::pipelines
