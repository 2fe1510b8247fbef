// The AutoencoderKL tiling planner: memory estimates of the plain, lean and tiled passes, their
// FLOPs, and Auto's choice between them (vae_tiling_plan.h says why).
#include "models/vae/vae_tiling_plan.h"

#include <algorithm>
#include <string>

#include "core/memory_info.h"
#include "models/vae/autoencoder_kl.h"

namespace fluxrt::models {
namespace {

// Accumulation element size of the estimates: f32 accumulations count as 4 bytes even in bf16.
size_t accumulation_bytes(DType dtype) { return std::max<size_t>(dtype_size(dtype), 4); }

}  // namespace

size_t vae_decode_estimate_bytes(const AutoencoderKLConfig& config, DType dtype, int64_t b, int64_t h, int64_t w) {
  const auto& ch = config.decoder_channels();
  int64_t widest = 0;
  const int n = static_cast<int>(ch.size());
  for (int i = 0; i < n; ++i) {  // level i (deepest first) runs at 1/2^(n-1-i) resolution
    const int64_t area = (h >> (n - 1 - i)) * (w >> (n - 1 - i));
    const int64_t prev = i == 0 ? ch[n - 1] : ch[n - i];
    widest = std::max(widest, area * std::max<int64_t>(ch[n - 1 - i], prev));
  }
  return static_cast<size_t>(6 * b * widest) * accumulation_bytes(dtype);
}

size_t vae_encode_estimate_bytes(const AutoencoderKLConfig& config, DType dtype, int64_t b, int64_t h, int64_t w) {
  const auto& ch = config.block_out_channels;
  int64_t widest = 0;
  for (size_t i = 0; i < ch.size(); ++i) widest = std::max(widest, (h >> i) * (w >> i) * int64_t{ch[i]});
  return static_cast<size_t>(6 * b * widest) * accumulation_bytes(dtype);
}

namespace {

// Peak estimate of the lean pass: the largest set of whole-image tensors alive at once (a resnet:
// input + normed input + conv1 output, or input + two outputs; an upsampler: input + output; the
// mid block's attention: about nine C x h x w tensors), in the pass dtype, plus the band copies
// of one convolution, each about one band, in f32 at most (the CPU backend takes them from the
// tensor allocator too): the blocked input and output and the upsampled rows; and for a 16-bit
// pass on a CPU without native bf16 convolution, which computes in f32, also the f32 copies of
// the input, the output and the residual (five in all; measured on AVX2, bf16 encode: 1261568
// bytes against the 1233408 that three copies gave).
// The tensor allocator's measured peak stays under it (Flux2Vae.LeanPassMatches-
// UntiledWithBoundedMemory); the process's resident peak does not: real klein shapes, bf16,
// 256x256, 16-row bands: +157 MiB against 93.5 estimated (the plain pass: +429 against 384), the
// rest being oneDNN's own buffers, which is what Auto's budget of half of MemAvailable leaves room for.
// `widest_row`: channels x width of the widest level's row; a band is never more than the image.
size_t lean_band_bytes(const TilingOptions& tiling, DType dtype, int64_t b, int64_t widest_row,
                       int64_t height) {
  const int64_t rows = tiling.band_rows > 0 ? tiling.band_rows : 1;
  const size_t band = tiling.band_rows > 0 ? size_t{0} : kLeanBandBytes;
  const size_t image = static_cast<size_t>(b * widest_row * (height + 2)) * 4;
  const size_t copies = dtype == DType::F32 ? 3 : 5;
  return copies * std::min(image, std::max(band, static_cast<size_t>(b * widest_row * (rows + 2)) * 4));
}

size_t lean_decode_bytes(const AutoencoderKLConfig& config, DType dtype, const TilingOptions& tiling, int64_t b,
                         int64_t h, int64_t w) {
  const auto& ch = config.decoder_channels();
  const int n = static_cast<int>(ch.size());
  const int64_t c3 = ch[n - 1], a0 = (h >> (n - 1)) * (w >> (n - 1));
  int64_t peak = (config.mid_block_add_attention ? 9 : 3) * c3 * a0, widest_row = c3 * (w >> (n - 1));
  int64_t prev = c3;
  for (int i = 0; i < n; ++i) {  // level i (deepest first) at 1/2^(n-1-i) resolution
    const int64_t area = (h >> (n - 1 - i)) * (w >> (n - 1 - i)), out = ch[n - 1 - i];
    if (i > 0) peak = std::max(peak, prev * (area / 4 + area));  // the previous level's upsampler
    for (int j = 0; j <= config.layers_per_block; ++j) {
      const int64_t cin = j == 0 ? prev : out;
      peak = std::max(peak, std::max(2 * cin + out, cin + 2 * out) * area);
    }
    widest_row = std::max(widest_row, std::max(prev, out) * (w >> (n - 1 - i)));
    prev = out;
  }
  peak = std::max(peak, (2 * ch[0] + config.out_channels) * h * w);  // conv_norm_out, conv_out
  return static_cast<size_t>(b * peak) * dtype_size(dtype) + lean_band_bytes(tiling, dtype, b, widest_row, h);
}

size_t lean_encode_bytes(const AutoencoderKLConfig& config, DType dtype, const TilingOptions& tiling, int64_t b,
                         int64_t h, int64_t w) {
  const auto& ch = config.block_out_channels;
  const int n = static_cast<int>(ch.size());
  int64_t peak = (config.in_channels + ch[0]) * h * w, widest_row = ch[0] * w;
  int64_t prev = ch[0];
  for (int i = 0; i < n; ++i) {
    const int64_t area = (h >> i) * (w >> i), out = ch[i];
    for (int j = 0; j < config.layers_per_block; ++j) {
      const int64_t cin = j == 0 ? prev : out;
      peak = std::max(peak, std::max(2 * cin + out, cin + 2 * out) * area);
    }
    if (i + 1 < n) peak = std::max(peak, out * (area + area / 4));  // downsampler
    widest_row = std::max(widest_row, std::max(prev, out) * (w >> i));
    prev = out;
  }
  const int64_t am = (h >> (n - 1)) * (w >> (n - 1));
  peak = std::max(peak, (config.mid_block_add_attention ? 9 : 3) * ch[n - 1] * am);
  return static_cast<size_t>(b * peak) * dtype_size(dtype) + lean_band_bytes(tiling, dtype, b, widest_row, h);
}

// Widest tensor of each stage (vae_tiling_plan.h numbering) in elements per batch element, for an
// h x w image.
std::vector<int64_t> decode_stage_widest(const AutoencoderKLConfig& config, int64_t h, int64_t w) {
  const auto& ch = config.decoder_channels();
  const int n = static_cast<int>(ch.size());
  std::vector<int64_t> v(static_cast<size_t>(n) + 2);
  v[0] = (h >> (n - 1)) * (w >> (n - 1)) * ch[n - 1];
  for (int i = 0; i < n; ++i) {  // level i (deepest first) runs at 1/2^(n-1-i) resolution
    const int64_t prev = i == 0 ? ch[n - 1] : ch[n - i];
    v[i + 1] = (h >> (n - 1 - i)) * (w >> (n - 1 - i)) * std::max<int64_t>(ch[n - 1 - i], prev);
  }
  v[n + 1] = h * w * ch[0];
  return v;
}

std::vector<int64_t> encode_stage_widest(const AutoencoderKLConfig& config, int64_t h, int64_t w) {
  const auto& ch = config.block_out_channels;
  const int n = static_cast<int>(ch.size());
  std::vector<int64_t> v(static_cast<size_t>(n) + 1);
  for (int i = 0; i < n; ++i)
    v[i] = (h >> i) * (w >> i) * std::max<int64_t>(ch[i], i == 0 ? ch[0] : ch[i - 1]);
  v[n] = (h >> (n - 1)) * (w >> (n - 1)) * ch[n - 1];
  return v;
}

double resnet_macs(double cin, double cout, double area) {
  return area * (9 * cin * cout + 9 * cout * cout + (cin != cout ? cin * cout : 0));
}

// MACs of each stage (same numbering) for an h x w image, batch 1.
std::vector<double> decode_stage_macs(const AutoencoderKLConfig& config, int64_t h, int64_t w) {
  const auto& dch = config.decoder_channels();
  const int n = static_cast<int>(dch.size());
  const double f = config.spatial_factor(), z = config.latent_channels;
  std::vector<double> macs(static_cast<size_t>(n) + 2, 0.0);
  double area = (static_cast<double>(h) / f) * (static_cast<double>(w) / f);
  const double c3 = dch[n - 1];
  if (config.use_post_quant_conv) macs[0] += area * z * z;
  macs[0] += area * 9 * z * c3 + 2 * resnet_macs(c3, c3, area);
  if (config.mid_block_add_attention) macs[0] += area * 4 * c3 * c3 + 2 * area * area * c3;
  double prev = c3;
  for (int i = 0; i < n; ++i) {
    const double out = dch[n - 1 - i];
    if (i > 0) {  // the previous level's nearest-2x upsampler conv, at this level's resolution
      area *= 4;
      macs[i + 1] += area * 9 * prev * prev;
    }
    for (int j = 0; j <= config.layers_per_block; ++j) macs[i + 1] += resnet_macs(j == 0 ? prev : out, out, area);
    prev = out;
  }
  macs[n + 1] = area * 9 * dch[0] * config.out_channels;
  return macs;
}

std::vector<double> encode_stage_macs(const AutoencoderKLConfig& config, int64_t h, int64_t w) {
  const auto& ech = config.block_out_channels;
  const int n = static_cast<int>(ech.size());
  std::vector<double> macs(static_cast<size_t>(n) + 1, 0.0);
  double area = static_cast<double>(h) * static_cast<double>(w);
  macs[0] += area * 9 * config.in_channels * ech[0];
  double prev = ech[0];
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < config.layers_per_block; ++j) macs[i] += resnet_macs(j == 0 ? prev : ech[i], ech[i], area);
    if (i + 1 < n) {
      area /= 4;
      macs[i] += area * 9 * ech[i] * ech[i];
    }
    prev = ech[i];
  }
  const double cm = ech[n - 1], z = config.latent_channels;
  macs[n] += 2 * resnet_macs(cm, cm, area);
  if (config.mid_block_add_attention) macs[n] += area * 4 * cm * cm + 2 * area * area * cm;
  macs[n] += area * 9 * cm * 2 * z;
  if (config.use_quant_conv) macs[n] += area * 4.0 * z * z;
  return macs;
}

// Tiled when forced, or (Auto) when neither the plain pass's nor the lean pass's estimate fits the
// budget; never when one tile covers the image. `factor` converts image pixels to the tiled input's
// pixels (decode: the latent grid, 1/8; encode: the image itself).
TilePlan make_tile_plan(const TilingOptions& t, size_t estimate, size_t lean_estimate, int64_t h, int64_t w,
                        int64_t factor, Device device) {
  TilePlan p;
  p.tile_height = h;
  p.tile_width = w;
  p.estimate_bytes = estimate;
  p.lean_estimate_bytes = lean_estimate;
  if (t.mode == TilingMode::Never) return p;
  if (t.mode == TilingMode::Lean) {
    p.lean = true;
    return p;
  }
  if (t.mode == TilingMode::Auto) {
    p.budget_bytes = t.memory_budget_bytes ? t.memory_budget_bytes : vae_auto_memory_budget_bytes(device);
    if (estimate <= p.budget_bytes) return p;
    if (lean_estimate <= p.budget_bytes) {
      p.lean = true;
      return p;
    }
  }
  if (h <= t.tile_pixels && w <= t.tile_pixels) {  // one tile is the whole image: the leanest exact pass
    p.lean = t.mode == TilingMode::Auto;
    return p;
  }
  p.tiled = true;
  if (t.tile_pixels % factor != 0 || t.overlap_pixels % factor != 0 || t.overlap_pixels >= t.tile_pixels ||
      t.overlap_pixels < 0) {
    p.rows = p.cols = 0;  // decode()/encode() reject these options with an error
    return p;
  }
  const int64_t tile = t.tile_pixels / factor, overlap = t.overlap_pixels / factor;
  p.rows = static_cast<int>(vae_tile_starts(h / factor, tile, overlap).size());
  p.cols = static_cast<int>(vae_tile_starts(w / factor, tile, overlap).size());
  p.tile_height = std::min<int64_t>(h, t.tile_pixels);
  p.tile_width = std::min<int64_t>(w, t.tile_pixels);
  return p;
}

// The whole-image part of a tiled pass: stages from the deep end (the mid block first) join it while
// each one's widest whole-image tensor is no larger than the widest tensor of one tile, so the tiled
// pass still needs about one tile's memory; those stages see every pixel (the mid block's attention,
// their GroupNorm statistics) and so match the untiled pass. `order` lists the stage indices
// deepest first; the estimate and executed FLOPs follow from the split.
struct StageSplit {
  int whole = 0;  // stages in the whole-image part
  size_t peak_bytes = 0;
  double macs = 0;
};
StageSplit split_stages(const std::vector<int64_t>& whole_widest, const std::vector<int64_t>& tile_widest,
                        const std::vector<double>& whole_macs, const std::vector<double>& tile_macs,
                        const std::vector<int>& order, int64_t tiles, int64_t batch, size_t elem,
                        size_t output_acc_bytes) {
  StageSplit r;
  const int64_t tile_max = *std::max_element(tile_widest.begin(), tile_widest.end());
  while (r.whole < static_cast<int>(order.size()) && whole_widest[order[r.whole]] <= tile_max) ++r.whole;
  const size_t es = std::max<size_t>(elem, 4);  // f32 accumulations, as the untiled estimate
  int64_t head = 0, tail = 0;
  std::vector<bool> in_whole(whole_widest.size(), false);
  for (int i = 0; i < r.whole; ++i) in_whole[order[i]] = true;
  for (size_t j = 0; j < whole_widest.size(); ++j) {
    if (in_whole[j]) {
      head = std::max(head, whole_widest[j]);
      r.macs += whole_macs[j];
    } else {
      tail = std::max(tail, tile_widest[j]);
      r.macs += static_cast<double>(tiles) * tile_macs[j];
    }
  }
  // The whole-image part's result (at most its widest tensor, in the pass dtype) is held while the tiles run.
  const size_t head_peak = static_cast<size_t>(6 * batch * head) * es;
  const size_t tile_peak = static_cast<size_t>(6 * batch * tail) * es + static_cast<size_t>(batch * head) * elem;
  r.peak_bytes = std::max(head_peak, tile_peak) + output_acc_bytes;
  return r;
}

}  // namespace

size_t vae_auto_memory_budget_bytes(Device device) {
  const size_t available = device_free_bytes(device);
  return available ? available / 2 : size_t{6} << 30;
}

void check_tiled_pass_fits(const TilePlan& plan, size_t free_bytes, Device device, const char* what) {
  constexpr double kGiB = 1073741824.0;
  FLUXRT_CHECK(!plan.tiled || free_bytes == 0 || plan.tiled_estimate_bytes <= free_bytes, ErrorCode::OutOfMemory,
               "{}: even {}x{} tiles of {}x{} pixels need about {:.2f} GiB, {:.2f} GiB free on {} (smaller tiles or "
               "a smaller image)",
               what, plan.rows, plan.cols, plan.tile_height, plan.tile_width, plan.tiled_estimate_bytes / kGiB,
               free_bytes / kGiB, device.str());
}

std::vector<int64_t> vae_tile_starts(int64_t n, int64_t t, int64_t o) {
  if (n <= t) return {0};
  std::vector<int64_t> s;
  for (int64_t p = 0;; p += t - o) {
    if (p + t >= n) {
      s.push_back(n - t);
      break;
    }
    s.push_back(p);
  }
  return s;
}

double vae_decode_flops(const AutoencoderKLConfig& config, int64_t b, int64_t h, int64_t w) {
  double macs = 0;
  for (double m : decode_stage_macs(config, h, w)) macs += m;
  return 2 * macs * static_cast<double>(b);
}

double vae_encode_flops(const AutoencoderKLConfig& config, int64_t b, int64_t h, int64_t w) {
  double macs = 0;
  for (double m : encode_stage_macs(config, h, w)) macs += m;
  return 2 * macs * static_cast<double>(b);
}

TilePlan plan_vae_decode(const AutoencoderKLConfig& c, DType dtype, const TilingOptions& tiling, int64_t b, int64_t h,
                         int64_t w, Device device) {
  const int64_t f = c.spatial_factor();
  TilePlan p = make_tile_plan(tiling, vae_decode_estimate_bytes(c, dtype, b, h, w), lean_decode_bytes(c, dtype, tiling, b, h, w),
                              h, w, f, device);
  if (!p.tiled || p.rows == 0) {
    p.executed_flops = vae_decode_flops(c, b, h, w);
    return p;
  }
  const int n = static_cast<int>(c.decoder_channels().size());
  std::vector<int> order;  // mid block, then up levels 0 .. n-2 (the full-resolution level always tiles)
  for (int k = 0; k < n; ++k) order.push_back(k);
  const size_t acc = static_cast<size_t>(b * c.out_channels * h * w + h * w) * 4;  // f32 blend sums
  const StageSplit s = split_stages(decode_stage_widest(c, h, w), decode_stage_widest(c, p.tile_height, p.tile_width),
                                    decode_stage_macs(c, h, w), decode_stage_macs(c, p.tile_height, p.tile_width),
                                    order, int64_t{p.rows} * p.cols, b, dtype_size(dtype), acc);
  p.whole_image_stages = s.whole;
  p.tiled_estimate_bytes = s.peak_bytes;
  p.executed_flops = 2 * s.macs * static_cast<double>(b);
  return p;
}

TilePlan plan_vae_encode(const AutoencoderKLConfig& c, DType dtype, const TilingOptions& tiling, int64_t b, int64_t h,
                         int64_t w, Device device) {
  TilePlan p = make_tile_plan(tiling, vae_encode_estimate_bytes(c, dtype, b, h, w), lean_encode_bytes(c, dtype, tiling, b, h, w),
                              h, w, 1, device);
  if (!p.tiled || p.rows == 0) {
    p.executed_flops = vae_encode_flops(c, b, h, w);
    return p;
  }
  const int n = static_cast<int>(c.block_out_channels.size());
  std::vector<int> order;  // mid block and outputs, then down levels n-1 .. 1 (level 0 always tiles)
  for (int k = n; k >= 1; --k) order.push_back(k);
  const int64_t f = c.spatial_factor();
  const size_t acc = static_cast<size_t>(b * c.block_out_channels.back() * (h / f) * (w / f) * 4 + (h / f) * (w / f) * 4);
  const StageSplit s = split_stages(encode_stage_widest(c, h, w), encode_stage_widest(c, p.tile_height, p.tile_width),
                                    encode_stage_macs(c, h, w), encode_stage_macs(c, p.tile_height, p.tile_width),
                                    order, int64_t{p.rows} * p.cols, b, dtype_size(dtype), acc);
  p.whole_image_stages = s.whole;
  p.tiled_estimate_bytes = s.peak_bytes;
  p.executed_flops = 2 * s.macs * static_cast<double>(b);
  return p;
}

}  // namespace fluxrt::models
