#pragma once
// The pipeline goldens' image check (docs/numerics.md, "images" row): each generated image against
// the PNG diffusers wrote for it, f32 every sample within 2/255, bf16 SSIM >= 0.98, and the worst
// figures for the test's log line. Header-only: the tests that use it link the io library.
//
//   const test::GoldenImagesWorst worst = test::expect_golden_images(out.images, c.dir(), c.outputs,
//   c.dtype); std::printf("%s: images max |diff| %d, min SSIM %.5f\n", c.name.c_str(), worst.max_abs,
//   worst.min_ssim);
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/image.h"
#include "support/image_compare.h"

namespace fluxrt::test {

struct GoldenImagesWorst {
  int max_abs = 0;
  double min_ssim = 1;
};

// images[i] against dir / outputs[i]; a size mismatch is a failure of that image.
inline GoldenImagesWorst expect_golden_images(const std::vector<io::Image>& images,
                                              const std::filesystem::path& dir,
                                              const std::vector<std::string>& outputs, DType dtype) {
  GoldenImagesWorst worst;
  for (size_t i = 0; i < images.size(); ++i) {
    const io::Image expected = io::to_rgb(io::read_png((dir / outputs.at(i)).string()));
    const io::Image actual = io::to_rgb(images[i]);
    EXPECT_EQ(actual.width, expected.width) << "image " << i;
    EXPECT_EQ(actual.height, expected.height) << "image " << i;
    if (actual.width != expected.width || actual.height != expected.height) continue;
    const ImageDiff d = compare_images(actual, expected);
    worst.min_ssim = std::min(worst.min_ssim, d.ssim);
    worst.max_abs = std::max(worst.max_abs, d.max_abs);
    if (dtype == DType::F32)
      EXPECT_LE(d.max_abs, 2) << "image " << i << ": " << d.str();
    else
      EXPECT_GE(d.ssim, 0.98) << "image " << i << ": " << d.str();
  }
  return worst;
}

}  // namespace fluxrt::test
