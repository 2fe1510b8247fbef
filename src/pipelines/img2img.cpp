#include "pipelines/img2img.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "models/weight_binder.h"
#include "pipelines/reference_image.h"

namespace fluxrt::pipelines {
namespace {

// The double nearest to the shortest decimal that reads back as `v` (what a user typed).
double decimal_double(float v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  double d = v;
  std::from_chars(buf, res.ptr, d);
  return d;
}

// A host f32 copy of a floating tensor, contiguous.
Tensor host_f32(const Tensor& t) { return models::to_device(t, Device::cpu()).to(DType::F32).contiguous(); }

}  // namespace

float round_to_dtype(float v, DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return bf16_to_f32(f32_to_bf16(v));
    case DType::F16:
      return f16_to_f32(f32_to_f16(v));
    default:
      return v;
  }
}

void check_elementwise_dtype(DType dtype, const char* what) {
  FLUXRT_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16, ErrorCode::InvalidArgument,
               "{}: dtype {} not supported (f32, bf16 or f16)", what, dtype_name(dtype));
}

int img2img_start_index(int num_steps, float strength) {
  FLUXRT_CHECK_FIELD(std::isfinite(strength) && strength >= 0.0f && strength <= 1.0f,
                     ErrorCode::InvalidArgument, "strength", "img2img strength {} must be in [0, 1]",
                     strength);
  FLUXRT_CHECK_FIELD(num_steps >= 1, ErrorCode::InvalidArgument, "steps", "img2img: num_steps {} < 1",
                     num_steps);
  // Python: min(N * strength, N) in double, then int(). The user typed a decimal (0.6), which
  // Python holds as the nearest double; widening the float (0.60000002...) instead would flip
  // int() at exact products (5 * 0.6 = 3 gives t_start 2, 3.0000001 gives 1).
  const double init_timestep =
      std::min(static_cast<double>(num_steps) * decimal_double(strength), static_cast<double>(num_steps));
  const int t_start = static_cast<int>(std::max(num_steps - init_timestep, 0.0));
  FLUXRT_CHECK_FIELD(num_steps - t_start >= 1, ErrorCode::InvalidArgument, "strength",
                     "img2img: strength {} with {} steps leaves no denoising step (raise strength or steps)",
                     strength, num_steps);
  return t_start;
}

Tensor scale_noise(const Tensor& sample, const Tensor& noise, float sigma) {
  FLUXRT_CHECK(sample.defined() && noise.defined() && sample.shape() == noise.shape(),
               ErrorCode::InvalidArgument, "scale_noise: sample {} and noise {} must have the same shape",
               sample.defined() ? sample.shape().str() : "undefined",
               noise.defined() ? noise.shape().str() : "undefined");
  const DType dt = sample.dtype();
  check_elementwise_dtype(dt, "scale_noise");
  // scheduler.sigmas.to(sample.dtype): sigma and 1 - sigma are tensors of that dtype.
  const float s = round_to_dtype(sigma, dt), one_minus = round_to_dtype(1.0f - s, dt);
  // On the host (a few times per request); the result goes to the sample's device.
  const Tensor x = host_f32(sample), n = host_f32(noise);
  Tensor out = Tensor::empty(sample.shape(), DType::F32);
  const float* xp = x.data<float>();
  const float* np_ = n.data<float>();
  float* op = out.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i)
    op[i] = round_to_dtype(round_to_dtype(s * np_[i], dt) + round_to_dtype(one_minus * xp[i], dt), dt);
  return models::to_device(out.to(dt), sample.device());
}

Tensor preprocess_init_image(const io::Image& image, int width, int height, const char* what,
                             const char* field) {
  FLUXRT_CHECK_FIELD(image.channels == 3 && image.width > 0 && image.height > 0 &&
                         image.pixels.size() == static_cast<size_t>(image.width) * image.height * 3,
                     ErrorCode::InvalidArgument, field,
                     "{}: need a non-empty RGB 8-bit image, got {}x{} with {} channels", what, image.width,
                     image.height, image.channels);
  const io::Image sized = (image.width == width && image.height == height)
                              ? image
                              : resize_lanczos_like_pil(image, width, height);
  Tensor out = Tensor::empty({1, 3, height, width}, DType::F32);
  float* p = out.data<float>();
  const int64_t plane = static_cast<int64_t>(width) * height;
  for (int64_t i = 0; i < plane; ++i)
    for (int c = 0; c < 3; ++c) {
      const float x = static_cast<float>(sized.pixels[i * 3 + c]) / 255.0f;  // pil_to_numpy
      p[c * plane + i] = 2.0f * x - 1.0f;                                    // normalize
    }
  return out;
}

bool InpaintMask::all_keep() const {
  return std::all_of(weights.begin(), weights.end(), [](float w) { return w == 0.0f; });
}

std::vector<float> binarise_inpaint_mask(const io::Image& mask, int source_width, int source_height,
                                         int width, int height) {
  FLUXRT_CHECK_FIELD(mask.channels == 3 && mask.width > 0 && mask.height > 0 &&
                         mask.pixels.size() == static_cast<size_t>(mask.width) * mask.height * 3,
                     ErrorCode::InvalidArgument, "mask", "mask: need a non-empty RGB 8-bit image, got {}x{}",
                     mask.width, mask.height);
  FLUXRT_CHECK_FIELD(mask.width == source_width && mask.height == source_height, ErrorCode::InvalidArgument,
                     "mask", "mask: {}x{} is not the size of the image being edited ({}x{})", mask.width,
                     mask.height, source_width, source_height);
  const io::Image sized =
      (mask.width == width && mask.height == height) ? mask : resize_lanczos_like_pil(mask, width, height);
  std::vector<float> pixels(static_cast<size_t>(width) * height);
  for (size_t i = 0; i < pixels.size(); ++i) {
    const uint8_t* rgb = &sized.pixels[i * 3];
    // PIL's RGB -> L: ITU-R 601-2 luma in 16-bit fixed point, rounded.
    const uint32_t luma = (rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16;
    pixels[i] = static_cast<float>(luma) / 255.0f >= 0.5f ? 1.0f : 0.0f;
  }
  return pixels;
}

InpaintMask prepare_inpaint_mask(const io::Image& mask, int source_width, int source_height, int width,
                                 int height, int64_t grid_h, int64_t grid_w) {
  FLUXRT_CHECK(grid_h > 0 && grid_w > 0 && height % grid_h == 0 && width % grid_w == 0, ErrorCode::Internal,
               "mask: a {}x{} token grid does not divide {}x{}", grid_w, grid_h, width, height);
  const std::vector<float> pixels = binarise_inpaint_mask(mask, source_width, source_height, width, height);
  // F.interpolate(size=(grid_h, grid_w), mode="bilinear", align_corners=False), as ATen's CPU
  // kernel computes it in float: source index scale * (dst + 0.5) - 0.5, clamped at 0.
  InpaintMask out;
  out.grid_h = grid_h;
  out.grid_w = grid_w;
  out.weights.resize(static_cast<size_t>(grid_h * grid_w));
  const float scale_h = static_cast<float>(height) / static_cast<float>(grid_h);
  const float scale_w = static_cast<float>(width) / static_cast<float>(grid_w);
  auto source = [](float scale, int64_t dst, int64_t size, int64_t* i0, int64_t* i1, float* l1) {
    const float src = std::max(scale * (static_cast<float>(dst) + 0.5f) - 0.5f, 0.0f);
    *i0 = static_cast<int64_t>(src);
    *i1 = *i0 + (*i0 < size - 1 ? 1 : 0);
    *l1 = src - static_cast<float>(*i0);
  };
  for (int64_t y = 0; y < grid_h; ++y) {
    int64_t y0 = 0, y1 = 0;
    float ly = 0;
    source(scale_h, y, height, &y0, &y1, &ly);
    for (int64_t x = 0; x < grid_w; ++x) {
      int64_t x0 = 0, x1 = 0;
      float lx = 0;
      source(scale_w, x, width, &x0, &x1, &lx);
      auto at = [&](int64_t r, int64_t c) { return pixels[static_cast<size_t>(r * width + c)]; };
      out.weights[static_cast<size_t>(y * grid_w + x)] =
          (1.0f - ly) * ((1.0f - lx) * at(y0, x0) + lx * at(y0, x1)) +
          ly * ((1.0f - lx) * at(y1, x0) + lx * at(y1, x1));
    }
  }
  return out;
}

InpaintMask prepare_latent_patch_mask(const io::Image& mask, int source_width, int source_height, int width,
                                      int height, int64_t latent_h, int64_t latent_w) {
  FLUXRT_CHECK(latent_h > 0 && latent_w > 0 && latent_h % 2 == 0 && latent_w % 2 == 0, ErrorCode::Internal,
               "mask: a {}x{} latent grid is not made of 2x2 patches", latent_w, latent_h);
  const std::vector<float> pixels = binarise_inpaint_mask(mask, source_width, source_height, width, height);
  // ATen's nearest: source index floor(dst * (in / out)) in float, at most in - 1.
  const float scale_h = static_cast<float>(height) / static_cast<float>(latent_h);
  const float scale_w = static_cast<float>(width) / static_cast<float>(latent_w);
  auto nearest = [](float scale, int64_t dst, int64_t size) {
    return std::min(static_cast<int64_t>(std::floor(static_cast<float>(dst) * scale)), size - 1);
  };
  InpaintMask out;
  out.grid_h = latent_h / 2;
  out.grid_w = latent_w / 2;
  out.period = 4;
  out.weights.resize(static_cast<size_t>(latent_h * latent_w));
  for (int64_t y = 0; y < latent_h; ++y)
    for (int64_t x = 0; x < latent_w; ++x) {
      const int64_t token = (y / 2) * out.grid_w + x / 2, corner = (y % 2) * 2 + x % 2;
      out.weights[static_cast<size_t>(token * 4 + corner)] =
          pixels[static_cast<size_t>(nearest(scale_h, y, height) * width + nearest(scale_w, x, width))];
    }
  return out;
}

Tensor blend_kept_region(const Tensor& latents, const Tensor& kept, const InpaintMask& mask) {
  FLUXRT_CHECK(latents.defined() && kept.defined() && latents.dim() == 3 && latents.shape() == kept.shape() &&
                   latents.size(1) == mask.grid_h * mask.grid_w && mask.period >= 1 &&
                   latents.size(2) % mask.period == 0 &&
                   mask.weights.size() == static_cast<size_t>(mask.grid_h * mask.grid_w * mask.period),
               ErrorCode::Internal, "inpaint blend: latents {}, kept {}, mask {}x{}",
               latents.defined() ? latents.shape().str() : "undefined",
               kept.defined() ? kept.shape().str() : "undefined", mask.grid_w, mask.grid_h);
  const DType dt = latents.dtype();
  check_elementwise_dtype(dt, "inpaint blend");
  const Tensor x = host_f32(latents), k = host_f32(kept);
  Tensor out = Tensor::empty(latents.shape(), DType::F32);
  const int64_t b = latents.size(0), tokens = latents.size(1), c = latents.size(2);
  const float* xp = x.data<float>();
  const float* kp = k.data<float>();
  float* op = out.data<float>();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t base = (bi * tokens + t) * c;
      for (int64_t ci = 0; ci < c; ++ci) {
        // The mask is cast to the latents' dtype (prepare_mask_latents), so is 1 - mask.
        const float m =
            round_to_dtype(mask.weights[static_cast<size_t>(t * mask.period + ci % mask.period)], dt);
        const float keep = round_to_dtype(1.0f - m, dt);
        op[base + ci] = round_to_dtype(
            round_to_dtype(keep * kp[base + ci], dt) + round_to_dtype(m * xp[base + ci], dt), dt);
      }
    }
  return models::to_device(out.to(dt), latents.device());
}

Tensor KeptRegion::start(const Schedule& schedule, int t_start) const {
  return scale_noise(source, noise, schedule.sigmas[static_cast<size_t>(t_start)]);
}

Tensor KeptRegion::after_step(int i, const Tensor& latents, const Schedule& schedule) const {
  const bool last = i + 1 >= schedule.num_steps();
  return blend_kept_region(
      latents, last ? source : scale_noise(source, noise, schedule.sigmas[static_cast<size_t>(i + 1)]), mask);
}

}  // namespace fluxrt::pipelines

// ------------------------------------------------------------------------------------------------
// padding_mask_crop

namespace fluxrt::pipelines {
namespace {

// PIL's "L" of an RGB pixel (ITU-R 601-2 luma, 16-bit fixed point, rounded).
uint8_t luma_of(const uint8_t* rgb) {
  return static_cast<uint8_t>((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
}

void check_rgb(const io::Image& image, const char* what, const char* field) {
  FLUXRT_CHECK_FIELD(image.channels == 3 && image.width > 0 && image.height > 0 &&
                         image.pixels.size() == static_cast<size_t>(image.width) * image.height * 3,
                     ErrorCode::InvalidArgument, field, "{}: need a non-empty RGB 8-bit image, got {}x{}",
                     what, image.width, image.height);
}

// Image.paste(src, (x, y)) onto an RGB canvas: the part of src that lands inside it.
void paste(io::Image& canvas, const io::Image& src, int x, int y) {
  for (int sy = std::max(0, -y); sy < src.height && y + sy < canvas.height; ++sy) {
    const int sx0 = std::max(0, -x), sx1 = std::min(src.width, canvas.width - x);
    if (sx1 <= sx0) continue;
    std::copy_n(&src.pixels[(static_cast<size_t>(sy) * src.width + sx0) * 3],
                static_cast<size_t>(sx1 - sx0) * 3,
                &canvas.pixels[(static_cast<size_t>(y + sy) * canvas.width + x + sx0) * 3]);
  }
}

io::Image black(int width, int height) {
  return io::Image{width, height, 3, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3, 0)};
}

}  // namespace

MaskCrop MaskCrop::of_mask(const io::Image& mask, int width, int height, int pad) {
  check_rgb(mask, "mask", "mask");
  FLUXRT_CHECK(width > 0 && height > 0, ErrorCode::Internal, "mask crop: run size {}x{}", width, height);
  FLUXRT_CHECK_FIELD(pad >= 0, ErrorCode::InvalidArgument, "padding_mask_crop",
                     "padding_mask_crop {} must not be negative", pad);
  const int w = mask.width, h = mask.height;
  // The bounding box of the pixels whose luminance is not 0 (not of the binarised mask: a faint
  // grey counts, as diffusers tests the "L" image against 0).
  int left = w, right = -1, top = h, bottom = -1;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      if (luma_of(&mask.pixels[(static_cast<size_t>(y) * w + x) * 3]) != 0) {
        left = std::min(left, x);
        right = std::max(right, x);
        top = std::min(top, y);
        bottom = std::max(bottom, y);
      }
  // diffusers counts the empty columns from each side; an empty mask counts all of them.
  const int empty_left = right < 0 ? w : left, empty_right = right < 0 ? w : w - 1 - right;
  const int empty_top = bottom < 0 ? h : top, empty_bottom = bottom < 0 ? h : h - 1 - bottom;
  MaskCrop c;
  c.x1 = std::max(empty_left - pad, 0);
  c.y1 = std::max(empty_top - pad, 0);
  c.x2 = std::min(w - empty_right + pad, w);
  c.y2 = std::min(h - empty_bottom + pad, h);
  FLUXRT_CHECK_FIELD(c.x2 > c.x1 && c.y2 > c.y1, ErrorCode::InvalidArgument, "padding_mask_crop",
                     "padding_mask_crop {}: the mask repaints nothing, so there is no region to crop to",
                     pad);
  // Grow the short side about the centre to the run's aspect ratio, in Python's doubles.
  const double ratio_region = static_cast<double>(c.x2 - c.x1) / (c.y2 - c.y1);
  const double ratio_run = static_cast<double>(width) / height;
  auto grow = [](int* lo, int* hi, int limit, double desired) {
    const int diff = static_cast<int>(desired - (*hi - *lo));  // int(): toward zero
    *lo -= diff / 2;  // diff >= 0 (up to a rounding that truncates to 0)
    *hi += diff - diff / 2;
    if (*hi >= limit) {  // shifted back inside, then clamped where the mask is too small
      const int over = *hi - limit;
      *hi -= over;
      *lo -= over;
    }
    if (*lo < 0) {
      *hi -= *lo;
      *lo = 0;
    }
    if (*hi >= limit) *hi = limit;
  };
  if (ratio_region > ratio_run)
    grow(&c.y1, &c.y2, h, (c.x2 - c.x1) / ratio_run);
  else
    grow(&c.x1, &c.x2, w, (c.y2 - c.y1) * ratio_run);
  return c;
}

io::Image MaskCrop::crop_and_fill(const io::Image& image, int width, int height) const {
  check_rgb(image, "mask crop", "init_image");
  FLUXRT_CHECK(x1 >= 0 && y1 >= 0 && x2 <= image.width && y2 <= image.height && x2 > x1 && y2 > y1,
               ErrorCode::Internal, "mask crop: window ({}, {}, {}, {}) outside {}x{}", x1, y1, x2, y2,
               image.width, image.height);
  const int cw = x2 - x1, ch = y2 - y1;
  io::Image window = black(cw, ch);
  for (int y = 0; y < ch; ++y)
    std::copy_n(&image.pixels[(static_cast<size_t>(y1 + y) * image.width + x1) * 3],
                static_cast<size_t>(cw) * 3, &window.pixels[static_cast<size_t>(y) * cw * 3]);
  // _resize_and_fill: fit inside width x height, centred, on black.
  const double ratio = static_cast<double>(width) / height, src_ratio = static_cast<double>(cw) / ch;
  const int src_w = ratio < src_ratio ? width : cw * height / ch;
  const int src_h = ratio >= src_ratio ? height : ch * width / cw;
  const io::Image resized = resize_lanczos_like_pil(window, src_w, src_h);
  io::Image out = black(width, height);
  paste(out, resized, width / 2 - src_w / 2, height / 2 - src_h / 2);
  // The uncovered bands: PIL resizes an empty box at the resized image's edge (with resize's
  // default filter, bicubic: diffusers passes none there), which gives every band row (column) the
  // blend of the rows (columns) next to that edge.
  const double rw = resized.width, rh = resized.height;
  if (ratio < src_ratio) {
    const int band = height / 2 - src_h / 2;
    if (band > 0) {
      paste(out, resize_like_pil(resized, width, band, {0, 0, double(width), 0}, PilFilter::Bicubic), 0, 0);
      paste(out, resize_like_pil(resized, width, band, {0, rh, double(width), rh}, PilFilter::Bicubic), 0,
            band + src_h);
    }
  } else if (ratio > src_ratio) {
    const int band = width / 2 - src_w / 2;
    if (band > 0) {
      paste(out, resize_like_pil(resized, band, height, {0, 0, 0, double(height)}, PilFilter::Bicubic), 0, 0);
      paste(out, resize_like_pil(resized, band, height, {rw, 0, rw, double(height)}, PilFilter::Bicubic),
            band + src_w, 0);
    }
  }
  return out;
}

io::Image MaskCrop::overlay(const io::Image& original, const io::Image& mask, const io::Image& generated,
                            Fit fit) const {
  check_rgb(original, "init image", "init_image");
  check_rgb(mask, "mask", "mask");
  check_rgb(generated, "generated image", "init_image");
  FLUXRT_CHECK(mask.width == original.width && mask.height == original.height && x2 <= original.width &&
                   y2 <= original.height,
               ErrorCode::Internal, "mask overlay: mask {}x{}, image {}x{}, window to ({}, {})", mask.width,
               mask.height, original.width, original.height, x2, y2);
  const int w = x2 - x1, h = y2 - y1, gw = generated.width, gh = generated.height;
  io::Image window = black(w, h);
  if (fit == Fit::Cover) {
    // VaeImageProcessor._resize_and_crop: cover the window keeping the aspect, centre-crop.
    const double ratio = static_cast<double>(w) / h, src_ratio = static_cast<double>(gw) / gh;
    const int src_w = ratio > src_ratio ? w : gw * h / gh;
    const int src_h = ratio <= src_ratio ? h : gh * w / gw;
    paste(window, resize_lanczos_like_pil(generated, src_w, src_h), w / 2 - src_w / 2, h / 2 - src_h / 2);
  } else {
    // Flux2ImageProcessor._resize_and_crop: Image.crop of a centred w x h box (Python's floor
    // division; outside the image it reads black), so the content keeps the run's scale.
    auto floor_half = [](int v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); };
    paste(window, generated, -floor_half(gw - w), -floor_half(gh - h));
  }
  io::Image out = black(original.width, original.height);
  paste(out, window, x1, y1);
  // The original with alpha a = 255 - mask is pasted onto transparent black ("RGBa", so its
  // colours are premultiplied), un-premultiplied, and alpha-composited over the generated image:
  // PIL's integer steps (Paste.c, Convert.c, AlphaComposite.c with 7 extra bits), which this
  // reproduces exactly for every (original, generated, mask) byte triple.
  for (size_t p = 0; p < static_cast<size_t>(original.width) * original.height; ++p) {
    const uint32_t a = 255u - luma_of(&mask.pixels[p * 3]);
    if (a == 0) continue;  // the generated pixel as it is
    const uint32_t coef1 = a * 255u * 255u * 128u / (a * 255u + 255u * (255u - a)),
                   coef2 = 255u * 128u - coef1;
    for (int c = 0; c < 3; ++c) {
      const uint32_t t = original.pixels[p * 3 + c] * a + 128u;
      uint32_t kept = ((t >> 8) + t) >> 8;  // premultiplied
      if (a != 255) kept = std::min<uint32_t>(255u * kept / a, 255u);
      const uint32_t mix = kept * coef1 + out.pixels[p * 3 + c] * coef2 + (0x80u << 7);
      out.pixels[p * 3 + c] = static_cast<uint8_t>(((((mix >> 8) + mix) >> 8)) >> 7);
    }
  }
  return out;
}

std::optional<PreparedMaskCrop> PreparedMaskCrop::prepare(const std::optional<int>& pad,
                                                          const io::Image& image, const io::Image& mask,
                                                          int width, int height, MaskCrop::Fit fit) {
  if (!pad) return std::nullopt;
  FLUXRT_CHECK_FIELD(mask.width == image.width && mask.height == image.height, ErrorCode::InvalidArgument,
                     "mask", "mask: {}x{} is not the size of the image being edited ({}x{})", mask.width,
                     mask.height, image.width, image.height);
  PreparedMaskCrop out;
  out.window = MaskCrop::of_mask(mask, width, height, *pad);
  out.fit = fit;
  out.original = image;
  out.mask = mask;
  out.cropped_image = out.window.crop_and_fill(image, width, height);
  out.cropped_mask = out.window.crop_and_fill(mask, width, height);
  return out;
}

void PreparedMaskCrop::overlay_all(std::vector<io::Image>& generated) const {
  for (io::Image& image : generated) image = window.overlay(original, mask, image, fit);
}

}  // namespace fluxrt::pipelines
