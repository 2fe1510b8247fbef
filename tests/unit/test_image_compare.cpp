// tests/support/image_compare: max abs difference, PSNR and SSIM against the numpy implementation
// in tools/reference/dump_klein_pipeline.py (tests/data/klein_pipeline/image_metrics.json), plus
// the properties a metric must have (identity, symmetry, the worst sample, clear errors).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/image_compare.h"

namespace fluxrt::test {
namespace {

struct TestImage {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

// Same integer recipe as formula_image() in dump_klein_pipeline.py: ramps plus an LCG texture.
TestImage formula_image(int width, int height, int channels, int64_t seed) {
  TestImage img{width, height, channels, std::vector<uint8_t>(static_cast<size_t>(width) * height * channels)};
  uint32_t state = static_cast<uint32_t>(seed);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c) {
        state = state * 1664525u + 1013904223u;
        const int ramp = (x * 255 / std::max(width - 1, 1) + y * 128 / std::max(height - 1, 1) + c * 60) % 256;
        const int noise = static_cast<int>((state >> 24) % 33) - 16;
        img.pixels[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(std::clamp(ramp + noise, 0, 255));
      }
  return img;
}

nlohmann::json load_expected() {
  const std::string path = std::string(FLUXRT_TEST_DATA_DIR) + "/klein_pipeline/image_metrics.json";
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::NotFound, "cannot open " + path);
  return nlohmann::json::parse(in);
}

TEST(ImageCompare, MatchesNumpyReference) {
  const auto expected = load_expected();
  ASSERT_GE(expected["pairs"].size(), 5u);
  for (const auto& p : expected["pairs"]) {
    const int w = p["width"], h = p["height"], ch = p["channels"];
    const TestImage a = formula_image(w, h, ch, p["seed_a"].get<int64_t>());
    TestImage b = formula_image(w, h, ch, p["seed_b"].get<int64_t>());
    if (p.value("inverted", false)) {
      b = a;
      for (auto& v : b.pixels) v = static_cast<uint8_t>(255 - v);
    }
    const ImageDiff d = compare_images(a, b);
    SCOPED_TRACE(p.dump());
    EXPECT_EQ(d.max_abs, p["max_abs"].get<int>());
    EXPECT_NEAR(d.mse, p["mse"].get<double>(), 1e-9 * std::max(1.0, p["mse"].get<double>()));
    if (p["psnr"].is_null()) {
      EXPECT_TRUE(std::isinf(d.psnr));
    } else {
      EXPECT_NEAR(d.psnr, p["psnr"].get<double>(), 1e-9);
    }
    EXPECT_NEAR(d.ssim, p["ssim"].get<double>(), 1e-10);
  }
}

TEST(ImageCompare, IdenticalImages) {
  const TestImage a = formula_image(23, 19, 3, 5);
  const ImageDiff d = compare_images(a, a);
  EXPECT_EQ(d.max_abs, 0);
  EXPECT_EQ(d.over_2, 0);
  EXPECT_TRUE(std::isinf(d.psnr));
  EXPECT_NEAR(d.ssim, 1.0, 1e-12);
}

TEST(ImageCompare, SymmetricAndBounded) {
  const TestImage a = formula_image(30, 20, 3, 1), b = formula_image(30, 20, 3, 2);
  const ImageDiff ab = compare_images(a, b), ba = compare_images(b, a);
  EXPECT_EQ(ab.max_abs, ba.max_abs);
  EXPECT_DOUBLE_EQ(ab.psnr, ba.psnr);
  EXPECT_NEAR(ab.ssim, ba.ssim, 1e-14);
  EXPECT_LT(ab.ssim, 1.0);
  EXPECT_GT(ab.ssim, -1.0);
}

TEST(ImageCompare, ReportsTheWorstSample) {
  const TestImage a = formula_image(16, 16, 3, 9);
  TestImage b = a;
  const size_t at = (static_cast<size_t>(7) * 16 + 12) * 3 + 2;  // x 12, y 7, channel 2
  b.pixels[at] = static_cast<uint8_t>(a.pixels[at] >= 128 ? a.pixels[at] - 40 : a.pixels[at] + 40);
  b.pixels[0] = static_cast<uint8_t>(a.pixels[0] >= 128 ? a.pixels[0] - 2 : a.pixels[0] + 2);
  const ImageDiff d = compare_images(b, a);
  EXPECT_EQ(d.max_abs, 40);
  EXPECT_EQ(d.over_2, 1);
  EXPECT_EQ(d.worst_x, 12);
  EXPECT_EQ(d.worst_y, 7);
  EXPECT_EQ(d.worst_c, 2);
  EXPECT_EQ(d.worst_actual, b.pixels[at]);
  EXPECT_EQ(d.worst_expected, a.pixels[at]);
  EXPECT_NE(d.str().find("max |diff| 40 at (x 12, y 7, c 2)"), std::string::npos) << d.str();
  // One changed sample moves SSIM, and more damage moves it further.
  TestImage worse = b;
  for (size_t i = 0; i < worse.pixels.size(); i += 7) worse.pixels[i] = static_cast<uint8_t>(255 - worse.pixels[i]);
  EXPECT_LT(d.ssim, 1.0);
  EXPECT_LT(compare_images(worse, a).ssim, d.ssim);
}

TEST(ImageCompare, BadInputIsAClearError) {
  const TestImage a = formula_image(16, 16, 3, 1), other = formula_image(16, 15, 3, 1);
  try {
    compare_images(a, other);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("16x16x3 vs 16x15x3"), std::string::npos) << e.what();
  }
  // Smaller than the SSIM window: the other statistics still work, SSIM is NaN, and asking for
  // it directly is an error.
  const TestImage small = formula_image(10, 30, 1, 3);
  const ImageDiff d = compare_images(small, small);
  EXPECT_EQ(d.max_abs, 0);
  EXPECT_TRUE(std::isnan(d.ssim));
  EXPECT_THROW(ssim_channel(small.pixels.data(), small.pixels.data(), 10, 30, 1, 0), Error);
  TestImage truncated = a;
  truncated.pixels.pop_back();
  EXPECT_THROW(compare_images(truncated, a), Error);
}

}  // namespace
}  // namespace fluxrt::test
