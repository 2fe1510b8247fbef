#pragma once
// Image-level comparison for the pipeline goldens (docs/numerics.md, "images" row): the largest
// 8-bit difference, PSNR and SSIM of two 8-bit images with interleaved channels.
//
// SSIM is Wang et al. (2004) on 8-bit values: dynamic range L = 255, K1 = 0.01, K2 = 0.03, local
// means/variances/covariance weighted by a normalised 11x11 gaussian (sigma 1.5), evaluated at
// every window position that lies fully inside the image (no padding, as the original ssim.m),
// averaged over positions, computed per channel and averaged over the channels (RGB: the mean of
// R, G and B; not luma). tools/reference/dump_klein_pipeline.py holds the numpy twin that
// produced tests/data/klein_pipeline/image_metrics.json.
//
//   const auto diff = fluxrt::test::compare_images(actual, expected);   // io::Image or the like
//   EXPECT_LE(diff.max_abs, 2) << diff.str();
#include <cstdint>
#include <string>

#include "core/error.h"

namespace fluxrt::test {

inline constexpr int kSsimWindow = 11;
inline constexpr double kSsimSigma = 1.5;

struct ImageDiff {
  int width = 0, height = 0, channels = 0;
  int max_abs = 0;       // largest |a - b| over all samples (0..255)
  int64_t over_2 = 0;    // samples with |a - b| > 2 (the f32 image tolerance)
  double mse = 0;        // mean squared 8-bit difference
  double psnr = 0;       // 10 log10(255^2 / mse); +inf when identical
  double ssim = 1;       // mean over channels; NaN when the image is smaller than the window
  int worst_x = -1, worst_y = -1, worst_c = -1;  // where max_abs occurs (first in raster order)
  int worst_actual = 0, worst_expected = 0;
  std::string str() const;
};

// SSIM of one channel (`channel` of `channels` interleaved). Throws InvalidArgument when the
// image is smaller than the 11x11 window.
double ssim_channel(const uint8_t* a, const uint8_t* b, int width, int height, int channels, int channel);

// All statistics; SSIM only when both sides are >= 11 (else NaN).
ImageDiff compare_images(const uint8_t* a, const uint8_t* b, int width, int height, int channels);

// Any image type with width, height, channels and a `pixels` byte vector (io::Image). The two
// must have the same geometry (InvalidArgument otherwise).
template <class Image>
ImageDiff compare_images(const Image& actual, const Image& expected) {
  FLUXRT_CHECK(actual.width == expected.width && actual.height == expected.height &&
                   actual.channels == expected.channels,
               ErrorCode::InvalidArgument, "compare_images: geometry {}x{}x{} vs {}x{}x{}", actual.width,
               actual.height, actual.channels, expected.width, expected.height, expected.channels);
  FLUXRT_CHECK(actual.pixels.size() == static_cast<size_t>(actual.width) * actual.height * actual.channels &&
                   expected.pixels.size() == actual.pixels.size(),
               ErrorCode::InvalidArgument, "compare_images: pixel buffer size does not match the geometry");
  return compare_images(actual.pixels.data(), expected.pixels.data(), actual.width, actual.height,
                        actual.channels);
}

}  // namespace fluxrt::test
