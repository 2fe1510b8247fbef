#include "support/image_compare.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

namespace fluxrt::test {
namespace {

std::array<double, kSsimWindow> gaussian_taps() {
  std::array<double, kSsimWindow> g{};
  double sum = 0;
  for (int i = 0; i < kSsimWindow; ++i) {
    const double x = i - (kSsimWindow - 1) / 2.0;
    g[i] = std::exp(-(x * x) / (2.0 * kSsimSigma * kSsimSigma));
    sum += g[i];
  }
  for (double& v : g) v /= sum;
  return g;
}

// The 2-D gaussian is the outer product of the 1-D taps, so the valid-region filter is a row pass
// then a column pass (in double, the result agrees with the direct 2-D sum to ~1e-15).
std::vector<double> filter_valid(const std::vector<double>& img, int width, int height) {
  static const std::array<double, kSsimWindow> g = gaussian_taps();
  const int ow = width - kSsimWindow + 1, oh = height - kSsimWindow + 1;
  std::vector<double> rows(static_cast<size_t>(height) * ow);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < ow; ++x) {
      double s = 0;
      for (int k = 0; k < kSsimWindow; ++k) s += g[k] * img[static_cast<size_t>(y) * width + x + k];
      rows[static_cast<size_t>(y) * ow + x] = s;
    }
  std::vector<double> out(static_cast<size_t>(oh) * ow);
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x) {
      double s = 0;
      for (int k = 0; k < kSsimWindow; ++k) s += g[k] * rows[static_cast<size_t>(y + k) * ow + x];
      out[static_cast<size_t>(y) * ow + x] = s;
    }
  return out;
}

}  // namespace

std::string ImageDiff::str() const {
  return fmt::format("{}x{}x{}: max |diff| {} at (x {}, y {}, c {}) actual {} expected {}, {} samples > 2, "
                     "PSNR {:.2f} dB, SSIM {:.6f}",
                     width, height, channels, max_abs, worst_x, worst_y, worst_c, worst_actual, worst_expected,
                     over_2, psnr, ssim);
}

double ssim_channel(const uint8_t* a, const uint8_t* b, int width, int height, int channels, int channel) {
  FLUXRT_CHECK(width >= kSsimWindow && height >= kSsimWindow, ErrorCode::InvalidArgument,
               "ssim: image {}x{} is smaller than the {}x{} window", width, height, kSsimWindow, kSsimWindow);
  FLUXRT_CHECK(channel >= 0 && channel < channels, ErrorCode::InvalidArgument, "ssim: channel {} of {}", channel,
               channels);
  const size_t n = static_cast<size_t>(width) * height;
  std::vector<double> va(n), vb(n), aa(n), bb(n), ab(n);
  for (size_t i = 0; i < n; ++i) {
    va[i] = a[i * channels + channel];
    vb[i] = b[i * channels + channel];
    aa[i] = va[i] * va[i];
    bb[i] = vb[i] * vb[i];
    ab[i] = va[i] * vb[i];
  }
  const auto mu_a = filter_valid(va, width, height), mu_b = filter_valid(vb, width, height);
  const auto e_aa = filter_valid(aa, width, height), e_bb = filter_valid(bb, width, height);
  const auto e_ab = filter_valid(ab, width, height);
  const double c1 = (0.01 * 255.0) * (0.01 * 255.0), c2 = (0.03 * 255.0) * (0.03 * 255.0);
  double sum = 0;
  for (size_t i = 0; i < mu_a.size(); ++i) {
    const double var_a = e_aa[i] - mu_a[i] * mu_a[i], var_b = e_bb[i] - mu_b[i] * mu_b[i];
    const double cov = e_ab[i] - mu_a[i] * mu_b[i];
    sum += ((2 * mu_a[i] * mu_b[i] + c1) * (2 * cov + c2)) /
           ((mu_a[i] * mu_a[i] + mu_b[i] * mu_b[i] + c1) * (var_a + var_b + c2));
  }
  return sum / static_cast<double>(mu_a.size());
}

ImageDiff compare_images(const uint8_t* a, const uint8_t* b, int width, int height, int channels) {
  FLUXRT_CHECK(width > 0 && height > 0 && channels > 0, ErrorCode::InvalidArgument,
               "compare_images: empty image {}x{}x{}", width, height, channels);
  ImageDiff d;
  d.width = width;
  d.height = height;
  d.channels = channels;
  const size_t count = static_cast<size_t>(width) * height * channels;
  double sq = 0;
  for (size_t i = 0; i < count; ++i) {
    const int diff = std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i]));
    sq += static_cast<double>(diff) * diff;
    if (diff > 2) ++d.over_2;
    if (d.worst_x < 0 || diff > d.max_abs) {
      d.max_abs = diff;
      const size_t pixel = i / channels;
      d.worst_x = static_cast<int>(pixel % width);
      d.worst_y = static_cast<int>(pixel / width);
      d.worst_c = static_cast<int>(i % channels);
      d.worst_actual = a[i];
      d.worst_expected = b[i];
    }
  }
  d.mse = sq / static_cast<double>(count);
  d.psnr = d.mse == 0 ? std::numeric_limits<double>::infinity() : 10.0 * std::log10(255.0 * 255.0 / d.mse);
  if (width >= kSsimWindow && height >= kSsimWindow) {
    double s = 0;
    for (int c = 0; c < channels; ++c) s += ssim_channel(a, b, width, height, channels, c);
    d.ssim = s / channels;
  } else {
    d.ssim = std::numeric_limits<double>::quiet_NaN();
  }
  return d;
}

}  // namespace fluxrt::test
