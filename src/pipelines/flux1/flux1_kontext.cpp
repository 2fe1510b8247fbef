// FLUX.1 Kontext's image preparation (flux1_kontext.h): FluxKontextPipeline.__call__ step 3.
#include "pipelines/flux1/flux1_kontext.h"

#include <cmath>
#include <tuple>

#include "core/error.h"
#include "pipelines/img2img.h"

namespace fluxrt::pipelines {
namespace {

// PREFERRED_KONTEXT_RESOLUTIONS: (width, height), the sizes Kontext was trained at.
constexpr int kPreferredResolutions[][2] = {
    {672, 1568}, {688, 1504}, {720, 1456},  {752, 1392}, {800, 1328}, {832, 1248},
    {880, 1184}, {944, 1104}, {1024, 1024}, {1104, 944}, {1184, 880}, {1248, 832},
    {1328, 800}, {1392, 752}, {1456, 720},  {1504, 688}, {1568, 672},
};

}  // namespace

void kontext_image_size(int width, int height, int multiple_of, int* out_width, int* out_height) {
  FLUXRT_CHECK_FIELD(
      width >= multiple_of && height >= multiple_of, ErrorCode::InvalidArgument, "reference_images",
      "the image to edit is {}x{}: Kontext needs sides of at least {} pixels", width, height, multiple_of);
  // image_processor.get_default_height_width: the sides floored to multiples of vae_scale_factor * 2
  const int w = width - width % multiple_of, h = height - height % multiple_of;
  const double aspect = static_cast<double>(w) / h;
  // min((abs(aspect_ratio - w / h), w, h) for w, h in PREFERRED_KONTEXT_RESOLUTIONS)
  std::tuple<double, int, int> best{INFINITY, 0, 0};
  for (const auto& r : kPreferredResolutions)
    best = std::min(
        best, std::tuple<double, int, int>{std::abs(aspect - static_cast<double>(r[0]) / r[1]), r[0], r[1]});
  *out_width = std::get<1>(best) / multiple_of * multiple_of;
  *out_height = std::get<2>(best) / multiple_of * multiple_of;
}

void kontext_output_size(int width, int height, int64_t max_area, int multiple_of, int* out_width,
                         int* out_height) {
  const double aspect = static_cast<double>(width) / height;
  // std::nearbyint in the default rounding mode rounds half to even, as Python's round does.
  const auto side = [&](double squared) {
    const double rounded = std::nearbyint(std::sqrt(squared));
    return static_cast<int>(rounded) / multiple_of * multiple_of;
  };
  const int w = side(static_cast<double>(max_area) * aspect),
            h = side(static_cast<double>(max_area) / aspect);
  FLUXRT_CHECK_FIELD(
      w >= multiple_of && h >= multiple_of, ErrorCode::InvalidArgument, "max_area",
      "max_area {} makes {}x{} into {}x{}: too small for its aspect ratio (sides of at least {})", max_area,
      width, height, w, h, multiple_of);
  *out_width = w;
  *out_height = h;
}

Tensor kontext_preprocess_image(const io::Image& image, int multiple_of) {
  int width = 0, height = 0;
  kontext_image_size(image.width, image.height, multiple_of, &width, &height);
  return preprocess_init_image(image, width, height, "the image to edit", "reference_images");
}

}  // namespace fluxrt::pipelines
