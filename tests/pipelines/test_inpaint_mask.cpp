// The inpainting pieces both families share (pipelines/img2img.h) on small hand-made masks, and
// the request rules for masks (pipelines/request_plan.cpp): what diffusers' mask processors and
// F.interpolate give, the blend's rounding in bf16, and the one-line refusals naming `mask`.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/image.h"
#include "pipelines/img2img.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "pipelines/pipeline.h"
#include "pipelines/request_plan.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;

// A w x h RGB image, value(x, y) in every channel.
template <class F>
io::Image gray(int w, int h, F value) {
  io::Image im{w, h, 3, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) im.pixels[(static_cast<size_t>(y) * w + x) * 3 + c] = value(x, y);
  return im;
}

TEST(InpaintMask, BinarisedAtHalfThenBilinearToTheTokenGrid) {
  // 32x32 pixels, 2x2 tokens of 16 pixels; white (>= 128) on the left half, 127 on the right.
  const io::Image mask = gray(32, 32, [](int x, int) { return x < 16 ? 128 : 127; });
  const InpaintMask m = prepare_inpaint_mask(mask, 32, 32, 32, 32, 2, 2);
  EXPECT_EQ(m.period, 1);
  EXPECT_EQ(m.weights, (std::vector<float>{1, 0, 1, 0}));
  // A white column at x = 7 and 8 of the first token only: align_corners=False samples pixels
  // 7 and 8 (weights 0.5 each) in both directions.
  const io::Image line = gray(32, 32, [](int x, int) { return x == 8 ? 255 : 0; });
  EXPECT_EQ(prepare_inpaint_mask(line, 32, 32, 32, 32, 2, 2).weights, (std::vector<float>{0.5f, 0, 0.5f, 0}));
  // RGB luminance as PIL's "L": pure red (76) keeps, yellow (226) repaints.
  io::Image red = gray(16, 16, [](int, int) { return 0; });
  for (size_t i = 0; i < red.pixels.size(); i += 3) red.pixels[i] = 255;
  EXPECT_EQ(prepare_inpaint_mask(red, 16, 16, 16, 16, 1, 1).weights, (std::vector<float>{0}));
  for (size_t i = 1; i < red.pixels.size(); i += 3) red.pixels[i] = 255;
  EXPECT_EQ(prepare_inpaint_mask(red, 16, 16, 16, 16, 1, 1).weights, (std::vector<float>{1}));
  EXPECT_FALSE(m.all_keep());
  EXPECT_TRUE(
      prepare_inpaint_mask(gray(16, 16, [](int, int) { return 0; }), 16, 16, 16, 16, 1, 1).all_keep());
}

TEST(InpaintMask, NearestPerLatentPixelForFlux1) {
  // 32x32 pixels, a 4x4 latent grid (8 pixels each), 2x2 tokens of 2x2 latent pixels: nearest
  // takes pixel (8y, 8x). Only latent pixel (1, 2) is white: token 1, corner (1, 0).
  const io::Image mask = gray(32, 32, [](int x, int y) { return (y == 8 && x == 16) ? 255 : 0; });
  const InpaintMask m = prepare_latent_patch_mask(mask, 32, 32, 32, 32, 4, 4);
  EXPECT_EQ(m.grid_h, 2);
  EXPECT_EQ(m.grid_w, 2);
  EXPECT_EQ(m.period, 4);
  std::vector<float> expected(16, 0.0f);
  expected[1 * 4 + 2] = 1.0f;
  EXPECT_EQ(m.weights, expected);
}

TEST(InpaintMask, TheMaskMustBeTheImagesSize) {
  try {
    prepare_inpaint_mask(gray(32, 16, [](int, int) { return 0; }), 32, 32, 32, 32, 2, 2);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "mask");
    EXPECT_NE(std::string(e.what()).find("32x16 is not the size of the image being edited (32x32)"),
              std::string::npos)
        << e.what();
  }
}

TEST(InpaintMask, BlendRoundsEachOperationToTheLatentDtype) {
  InpaintMask m;
  m.grid_h = 1;
  m.grid_w = 2;
  m.weights = {0.25f, 1.0f};
  const Tensor latents = Tensor::from_vector({1.0f, 3.0f, 2.0f, 5.0f}, {1, 2, 2}, DType::F32).to(DType::BF16);
  const Tensor kept =
      Tensor::from_vector({1.00390625f, 7.0f, 9.0f, 9.0f}, {1, 2, 2}, DType::F32).to(DType::BF16);
  const std::vector<float> out = blend_kept_region(latents, kept, m).to(DType::F32).to_vector();
  // token 0: 0.75 * kept + 0.25 * latents, each product and the sum in bf16; token 1: latents.
  const float k0 = bf16_to_f32(f32_to_bf16(0.75f * 1.0f));  // kept 1.0039 is 1.0 in bf16
  EXPECT_EQ(out[0], bf16_to_f32(f32_to_bf16(k0 + 0.25f)));
  EXPECT_EQ(out[1], bf16_to_f32(f32_to_bf16(0.75f * 7.0f + 0.75f)));
  EXPECT_EQ(out[2], 2.0f);
  EXPECT_EQ(out[3], 5.0f);
}

// The rules every family shares, on the tiny klein folder's facts.
class InpaintRequests : public ::testing::Test {
 protected:
  static ModelFacts facts() {
    return Flux2KleinPipeline::describe(fs::path(FLUXRT_TEST_DATA_DIR) / "models" / "flux2-klein-tiny", {});
  }
  static fluxrt::Image image(int w, int h) {
    return fluxrt::Image{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3, 128)};
  }
  static std::string field_of(const fluxrt::GenerateRequest& r, const ModelFacts& f) {
    try {
      plan_request(flux2_klein_kind(), r, f, MemoryCheck{});
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      return e.field();
    }
    return "(accepted)";
  }
};

TEST_F(InpaintRequests, MaskNeedsItsImageOfTheSameSizeAndAModelThatTakesIt) {
  fluxrt::GenerateRequest r;
  r.steps = 2;
  r.mask_image = image(64, 64);
  EXPECT_EQ(field_of(r, facts()), "mask");  // no image to edit
  r.init_image = image(64, 48);
  EXPECT_EQ(field_of(r, facts()), "mask");  // another size
  r.init_image = image(64, 64);
  EXPECT_EQ(field_of(r, facts()), "(accepted)");
  const fluxrt::RequestPlan plan = plan_request(flux2_klein_kind(), r, facts(), MemoryCheck{});
  EXPECT_EQ(plan.strength, std::optional<float>(0.8f));  // Flux2KleinInpaintPipeline's default
  EXPECT_EQ(plan.width, 64);
  ModelFacts no_masks = facts();
  no_masks.limits.mask = false;  // a family that does not inpaint
  EXPECT_EQ(field_of(r, no_masks), "mask");
  r.mask_image.reset();  // the init image alone is img2img, which klein does not have
  EXPECT_EQ(field_of(r, facts()), "init_image");
}

TEST_F(InpaintRequests, PaddingMaskCropNeedsAMaskAndAModelThatHasIt) {
  fluxrt::GenerateRequest r;
  r.steps = 2;
  r.padding_mask_crop = 8;
  EXPECT_EQ(field_of(r, facts()), "padding_mask_crop");  // no mask
  r.init_image = image(64, 64);
  r.mask_image = image(64, 64);
  EXPECT_EQ(field_of(r, facts()), "(accepted)");
  r.padding_mask_crop = -1;
  EXPECT_EQ(field_of(r, facts()), "padding_mask_crop");
  r.padding_mask_crop = 0;
  ModelFacts fill = facts();
  fill.limits.padding_mask_crop = false;  // FluxFillPipeline has none
  EXPECT_EQ(field_of(r, fill), "padding_mask_crop");
}

// diffusers 0.42.1 VaeImageProcessor.get_crop_region on masks of one rectangle (value v inside):
// (mask w, h, rectangle, run w, h, pad) -> window, as it printed them.
TEST(MaskCrop, RegionMatchesDiffusers) {
  struct Case {
    int w, h, x0, y0, x1, y1, v, run_w, run_h, pad;
    MaskCrop expected;
  };
  const Case cases[] = {
      {100, 75, 70, 10, 90, 20, 255, 64, 64, 0, {70, 5, 90, 25}},   // heightened about its centre
      {100, 75, 70, 10, 90, 20, 255, 96, 64, 8, {61, 2, 100, 28}},  // widened, shifted back inside
      {100, 75, 5, 50, 95, 58, 255, 64, 64, 4, {1, 0, 99, 75}},     // cannot be squared: clamped
      {100, 75, 0, 0, 3, 3, 1, 64, 32, 2, {0, 0, 10, 5}},           // luminance 1 counts
      {64, 64, 30, 30, 34, 34, 255, 64, 64, 100, {0, 0, 64, 64}},   // padding past every side
      {40, 120, 10, 100, 12, 110, 255, 48, 32, 3, {0, 97, 24, 113}},
  };
  for (const Case& c : cases) {
    const io::Image mask = gray(
        c.w, c.h, [&](int x, int y) { return x >= c.x0 && x < c.x1 && y >= c.y0 && y < c.y1 ? c.v : 0; });
    const MaskCrop got = MaskCrop::of_mask(mask, c.run_w, c.run_h, c.pad);
    EXPECT_EQ((std::vector<int>{got.x1, got.y1, got.x2, got.y2}),
              (std::vector<int>{c.expected.x1, c.expected.y1, c.expected.x2, c.expected.y2}))
        << c.w << "x" << c.h << " pad " << c.pad;
  }
}

TEST(MaskCrop, AnEmptyMaskHasNoWindow) {
  try {
    MaskCrop::of_mask(gray(64, 64, [](int, int) { return 0; }), 64, 64, 0);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "padding_mask_crop");
  }
}

TEST(MaskCrop, OverlayKeepsTheOriginalWhereTheMaskIsBlack) {
  // Outside the window and under black mask pixels the original comes back exactly; under white
  // ones the generated pixel (PIL's alpha composite with alpha 0 and 255).
  const io::Image original = gray(40, 30, [](int x, int y) { return (x * 7 + y * 3) % 256; });
  const io::Image mask =
      gray(40, 30, [](int x, int y) { return x >= 20 && x < 30 && y >= 5 && y < 15 ? 255 : 0; });
  const MaskCrop window = MaskCrop::of_mask(mask, 16, 16, 2);
  const io::Image generated = gray(16, 16, [](int, int) { return 200; });
  const io::Image out = window.overlay(original, mask, generated, MaskCrop::Fit::Cover);
  ASSERT_EQ(out.width, 40);
  ASSERT_EQ(out.height, 30);
  for (size_t i = 0; i < out.pixels.size(); ++i) {
    const size_t p = i / 3;
    if (mask.pixels[p * 3] == 0) {
      ASSERT_EQ(out.pixels[i], original.pixels[i]) << "pixel " << p;
    } else {
      ASSERT_EQ(out.pixels[i], 200) << "pixel " << p;  // a flat image resizes to itself
    }
  }
}

}  // namespace
}  // namespace fluxrt::pipelines
