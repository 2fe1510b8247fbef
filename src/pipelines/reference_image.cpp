#include "pipelines/reference_image.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "io/public_image.h"

namespace fluxrt::pipelines {
namespace {

// PIL keeps 8-bit resampling in 32-bit integers: 8 bits of pixel, 2 bits of head room for
// negative lobes, the rest coefficient precision.
constexpr int kPrecisionBits = 32 - 8 - 2;

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= std::numbers::pi;
  return std::sin(x) / x;
}

// Lanczos-3 window, half-open on the right as PIL evaluates it.
double lanczos3(double x) { return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3.0) : 0.0; }

// PIL's bicubic (Keys, a = -0.5), support 2.
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

struct Filter {
  double (*weight)(double);
  double support;
};
Filter filter_of(PilFilter f) {
  return f == PilFilter::Bicubic ? Filter{&bicubic, 2.0} : Filter{&lanczos3, 3.0};
}

// One axis of the separable filter: for each output position the first input index, the tap
// count and the fixed-point taps.
struct AxisFilter {
  int taps_per_output = 0;
  std::vector<int> first, count;
  std::vector<int32_t> taps;  // out_size * taps_per_output
};

// Output o samples the source span [in0, in1) (PIL's box; the whole axis unless a box is given).
// An empty span (in0 == in1) gives scale 0: every output is the filter centred at in0.
AxisFilter make_axis_filter(int in_size, double in0, double in1, int out_size, const Filter& kernel) {
  AxisFilter f;
  const double scale = (in1 - in0) / out_size;
  const double filter_scale = std::max(scale, 1.0);  // widen the kernel only when shrinking
  const double support = kernel.support * filter_scale;
  f.taps_per_output = static_cast<int>(std::ceil(support)) * 2 + 1;
  f.first.resize(out_size);
  f.count.resize(out_size);
  f.taps.assign(static_cast<size_t>(out_size) * f.taps_per_output, 0);
  std::vector<double> weights(f.taps_per_output);
  for (int o = 0; o < out_size; ++o) {
    const double center = in0 + (o + 0.5) * scale;
    // PIL converts with a C cast (truncation toward zero) after adding 0.5.
    int lo = static_cast<int>(center - support + 0.5);
    lo = std::max(lo, 0);
    int hi = static_cast<int>(center + support + 0.5);
    hi = std::min(hi, in_size);
    const int n = hi - lo;
    double sum = 0;
    for (int k = 0; k < n; ++k) {
      weights[k] = kernel.weight((k + lo - center + 0.5) / filter_scale);
      sum += weights[k];
    }
    int32_t* taps = &f.taps[static_cast<size_t>(o) * f.taps_per_output];
    for (int k = 0; k < n; ++k) {
      const double w = sum != 0.0 ? weights[k] / sum : weights[k];
      const double fixed = w * (1 << kPrecisionBits);
      taps[k] = static_cast<int32_t>(w < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    f.first[o] = lo;
    f.count[o] = n;
  }
  return f;
}

uint8_t clip_fixed_to_u8(int32_t acc) {
  if (acc >= (1 << kPrecisionBits << 8)) return 255;
  if (acc <= 0) return 0;
  return static_cast<uint8_t>(acc >> kPrecisionBits);
}

// Filters along x (stride_elem = channels, line = row) or y; `in` and `out` are interleaved
// 8-bit images. Rounds to 8 bits at the end of each pass, as PIL does between its two passes.
void resample_axis(const uint8_t* in, int in_w, int in_h, uint8_t* out, int out_w, int out_h, int channels,
                   bool horizontal, const AxisFilter& f) {
  (void)in_h;
  const int32_t half = 1 << (kPrecisionBits - 1);
  for (int y = 0; y < out_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      const int o = horizontal ? x : y;
      const int32_t* taps = &f.taps[static_cast<size_t>(o) * f.taps_per_output];
      for (int c = 0; c < channels; ++c) {
        int32_t acc = half;
        for (int k = 0; k < f.count[o]; ++k) {
          const int sx = horizontal ? f.first[o] + k : x;
          const int sy = horizontal ? y : f.first[o] + k;
          acc += static_cast<int32_t>(in[(static_cast<size_t>(sy) * in_w + sx) * channels + c]) * taps[k];
        }
        out[(static_cast<size_t>(y) * out_w + x) * channels + c] = clip_fixed_to_u8(acc);
      }
    }
  }
}

// PIL's RGBA -> RGBa: c * a / 255 with its rounding trick.
void premultiply_alpha(io::Image& im) {
  for (size_t p = 0; p < im.pixels.size(); p += 4) {
    const uint32_t a = im.pixels[p + 3];
    for (int c = 0; c < 3; ++c) {
      const uint32_t t = im.pixels[p + c] * a + 128;
      im.pixels[p + c] = static_cast<uint8_t>(((t >> 8) + t) >> 8);
    }
  }
}

// PIL's RGBa -> RGBA: colours of fully transparent or opaque pixels are kept as they are.
void unpremultiply_alpha(io::Image& im) {
  for (size_t p = 0; p < im.pixels.size(); p += 4) {
    const uint32_t a = im.pixels[p + 3];
    if (a == 0 || a == 255) continue;
    for (int c = 0; c < 3; ++c) im.pixels[p + c] = static_cast<uint8_t>(std::min<uint32_t>(255u * im.pixels[p + c] / a, 255u));
  }
}

void check_image_buffer(const io::Image& image, const char* what) {
  FLUXRT_CHECK(image.width > 0 && image.height > 0, ErrorCode::InvalidArgument, "{}: empty image ({}x{})", what,
               image.width, image.height);
  FLUXRT_CHECK(image.channels == 1 || image.channels == 3 || image.channels == 4, ErrorCode::InvalidArgument,
               "{}: {} channels, expected 1, 3 or 4", what, image.channels);
  FLUXRT_CHECK(image.pixels.size() == static_cast<size_t>(image.width) * image.height * image.channels,
               ErrorCode::InvalidArgument, "{}: {} pixel bytes for {}x{}x{}", what, image.pixels.size(), image.width,
               image.height, image.channels);
}

}  // namespace

io::Image resize_lanczos_like_pil(const io::Image& image, int width, int height) {
  return resize_like_pil(image, width, height, {0, 0, double(image.width), double(image.height)});
}

io::Image resize_like_pil(const io::Image& image, int width, int height, const PilBox& box,
                          PilFilter filter) {
  const Filter kernel = filter_of(filter);
  check_image_buffer(image, "lanczos resize");
  FLUXRT_CHECK(width > 0 && height > 0 && width <= io::kMaxImageSide && height <= io::kMaxImageSide,
               ErrorCode::InvalidArgument, "lanczos resize: invalid target size {}x{}", width, height);
  FLUXRT_CHECK(box.x0 >= 0 && box.y0 >= 0 && box.x0 <= box.x1 && box.y0 <= box.y1 && box.x1 <= image.width &&
                   box.y1 <= image.height,
               ErrorCode::InvalidArgument, "lanczos resize: box ({}, {}, {}, {}) is not within {}x{}", box.x0,
               box.y0, box.x1, box.y1, image.width, image.height);
  const bool whole_x = box.x0 == 0 && box.x1 == image.width, whole_y = box.y0 == 0 && box.y1 == image.height;
  io::Image src = image;
  const bool rgba = src.channels == 4;
  if (rgba) premultiply_alpha(src);
  const int ch = src.channels;
  // PIL skips a pass whose size and span do not change (the pass would be the identity anyway
  // only up to rounding, so skipping matters for exactness).
  auto horizontal = [&] {
    if (width == src.width && whole_x) return;
    io::Image tmp{width, src.height, ch, std::vector<uint8_t>(static_cast<size_t>(width) * src.height * ch)};
    resample_axis(src.pixels.data(), src.width, src.height, tmp.pixels.data(), width, src.height, ch, true,
                  make_axis_filter(src.width, box.x0, box.x1, width, kernel));
    src = std::move(tmp);
  };
  auto vertical = [&] {
    if (height == src.height && whole_y) return;
    io::Image tmp{src.width, height, ch, std::vector<uint8_t>(static_cast<size_t>(src.width) * height * ch)};
    resample_axis(src.pixels.data(), src.width, src.height, tmp.pixels.data(), src.width, height, ch, false,
                  make_axis_filter(src.height, box.y0, box.y1, height, kernel));
    src = std::move(tmp);
  };
  // Pillow 13 (Resample.c, horizontal_first) filters rows first unless the height loses more
  // than twice as many pixels as the width; the order decides the 8-bit rounding between passes.
  const int lost_rows = image.height - height, lost_columns = image.width - width;
  if (lost_rows > 0 && lost_rows > 2 * lost_columns) {
    vertical();
    horizontal();
  } else {
    horizontal();
    vertical();
  }
  if (rgba) unpremultiply_alpha(src);
  return src;
}

void reference_target_size(int width, int height, int64_t target_area, int* out_width, int* out_height) {
  const double scale = std::sqrt(static_cast<double>(target_area) / (static_cast<double>(width) * height));
  *out_width = static_cast<int>(width * scale);
  *out_height = static_cast<int>(height * scale);
}

void check_reference_image(const io::Image& image, const char* what) {
  check_image_buffer(image, what);
  FLUXRT_CHECK_FIELD(image.width >= kReferenceMinSide && image.height >= kReferenceMinSide,
                     ErrorCode::InvalidArgument, "reference_images",
                     "{} too small: {}x{}, both sides must be at least {} pixels", what, image.width,
                     image.height, kReferenceMinSide);
  const double aspect = std::max(static_cast<double>(image.width) / image.height,
                                 static_cast<double>(image.height) / image.width);
  FLUXRT_CHECK_FIELD(aspect <= kReferenceMaxAspect, ErrorCode::InvalidArgument, "reference_images",
                     "{} aspect ratio too extreme: {}x{} ({:.1f}:1, at most {}:1)", what, image.width,
                     image.height, aspect, kReferenceMaxAspect);
}

Tensor preprocess_reference_image(const io::Image& image, int multiple_of) {
  FLUXRT_CHECK(multiple_of > 0, ErrorCode::InvalidArgument, "reference image: size multiple {} must be positive",
               multiple_of);
  check_reference_image(image);
  io::Image img = image;
  if (static_cast<int64_t>(img.width) * img.height > kReferenceTargetArea) {
    int w = 0, h = 0;
    reference_target_size(img.width, img.height, kReferenceTargetArea, &w, &h);
    img = resize_lanczos_like_pil(img, w, h);
  }
  // Floor to the packed-token grid (vae_scale_factor * 2 pixels), then Flux2ImageProcessor's
  // "crop" resize mode, which only cuts a centred window (no resampling).
  const int crop_w = img.width / multiple_of * multiple_of, crop_h = img.height / multiple_of * multiple_of;
  const int left = (img.width - crop_w) / 2, top = (img.height - crop_h) / 2;
  const io::Image rgb = io::to_rgb(img);
  Tensor out = Tensor::empty({1, 3, crop_h, crop_w}, DType::F32);  // [1, 3, h, w]
  float* dst = out.data<float>();
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < crop_h; ++y) {
      const uint8_t* row = &rgb.pixels[(static_cast<size_t>(y + top) * rgb.width + left) * 3];
      float* out_row = dst + (static_cast<size_t>(c) * crop_h + y) * crop_w;
      for (int x = 0; x < crop_w; ++x) {
        // pil_to_numpy: f32 / 255, then normalize: 2 x - 1, each rounded to f32.
        const float unit = static_cast<float>(row[x * 3 + c]) / 255.0f;
        out_row[x] = 2.0f * unit - 1.0f;
      }
    }
  }
  return out;
}

io::Image image_of_request(const fluxrt::Image& image, const std::string& what, const char* field) {
  try {
    return io::from_public(image, what.c_str());
  } catch (const Error& e) {
    throw Error(e.code(), e.what(), field);
  }
}

}  // namespace fluxrt::pipelines
