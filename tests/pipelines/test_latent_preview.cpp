// LatentPreviewer: the least-squares colour map recovers an affine latent -> colour relation the
// images were made with, previews tokens with it at the output size, and stays silent before any
// image and for latents of another width.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "pipelines/latent_preview.h"

namespace fluxrt::pipelines {
namespace {

// Tokens [B, lh*lw, 4c] (2x2 patches of c-channel latent cells, packed (channel, dy, dx)) and
// images [B, 2*lh*p, 2*lw*p, 3] whose every cell block has the colour clamp(W . cell + b) (8-bit).
void make_batch(int64_t b, int64_t lh, int64_t lw, int64_t c, int64_t p, uint32_t seed, Tensor* tokens,
                Tensor* images, const std::vector<float>& w) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t gh = 2 * lh, gw = 2 * lw;
  *tokens = Tensor::empty({b, lh * lw, 4 * c}, DType::F32);
  *images = Tensor::empty({b, gh * p, gw * p, 3}, DType::U8);
  float* t = tokens->data<float>();
  uint8_t* im = images->data<uint8_t>();
  for (int64_t i = 0; i < b * lh * lw * 4 * c; ++i) t[i] = normal(rng);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t gi = 0; gi < gh; ++gi)
      for (int64_t gj = 0; gj < gw; ++gj) {
        const float* token = t + ((bi * lh + gi / 2) * lw + gj / 2) * 4 * c;
        const int64_t sub = (gi % 2) * 2 + gj % 2;
        for (int ch = 0; ch < 3; ++ch) {
          float v = w[c * 3 + ch];
          for (int64_t k = 0; k < c; ++k) v += token[k * 4 + sub] * w[k * 3 + ch];
          const uint8_t q = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0f, 1.0f) * 255.0f));
          for (int64_t y = gi * p; y < (gi + 1) * p; ++y)
            for (int64_t x = gj * p; x < (gj + 1) * p; ++x) im[((bi * gh * p + y) * gw * p + x) * 3 + ch] = q;
        }
      }
}

TEST(LatentPreview, RecoversTheColourMapAndPreviewsWithIt) {
  const int64_t c = 6, lh = 8, lw = 10, p = 4;
  std::vector<float> w((c + 1) * 3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.04f * static_cast<float>((i * 7) % 5) - 0.05f;
  for (int ch = 0; ch < 3; ++ch) w[c * 3 + ch] = 0.5f;  // mid-grey offset: few values clamp
  Tensor tokens, images;
  make_batch(3, lh, lw, c, p, 1, &tokens, &images, w);

  LatentPreviewer previewer;
  EXPECT_FALSE(previewer.ready());
  EXPECT_TRUE(previewer.preview(tokens, lh, lw, 40, 32).empty());
  previewer.observe(tokens, images, lh, lw);
  ASSERT_TRUE(previewer.ready());

  // New tokens, made with the same map: the preview at the cell grid's own size is the image up
  // to 8-bit rounding and the small ridge.
  Tensor fresh, want;
  make_batch(1, lh, lw, c, 1, 2, &fresh, &want, w);
  const std::vector<io::Image> got =
      previewer.preview(fresh, lh, lw, static_cast<int>(2 * lw), static_cast<int>(2 * lh));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].width, 2 * lw);
  ASSERT_EQ(got[0].height, 2 * lh);
  int worst = 0;
  for (size_t i = 0; i < got[0].pixels.size(); ++i)
    worst = std::max(worst, std::abs(int(got[0].pixels[i]) - int(want.data<uint8_t>()[i])));
  EXPECT_LE(worst, 3);
  // Scaled to an output size.
  const std::vector<io::Image> big = previewer.preview(fresh, lh, lw, 40, 32);
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].width, 40);
  EXPECT_EQ(big[0].height, 32);
  EXPECT_EQ(big[0].pixels.size(), 40u * 32 * 3);
  // Latents of another width (another model) give no preview.
  Tensor other, other_images;
  make_batch(1, lh, lw, c + 1, 1, 3, &other, &other_images, std::vector<float>((c + 2) * 3, 0.1f));
  EXPECT_TRUE(previewer.preview(other, lh, lw, 10, 8).empty());
}

TEST(LatentPreview, ObserveChecksTheShapes) {
  LatentPreviewer previewer;
  Tensor tokens = Tensor::zeros({1, 12, 4}, DType::F32);
  EXPECT_THROW(previewer.observe(tokens, Tensor::zeros({1, 16, 16, 3}, DType::U8), 4, 4),
               Error);                                                                           // 12 tokens
  EXPECT_THROW(previewer.observe(tokens, Tensor::zeros({2, 6, 8, 3}, DType::U8), 3, 4), Error);  // batch
  EXPECT_THROW(previewer.observe(tokens, Tensor::zeros({1, 9, 8, 3}, DType::U8), 3, 4), Error);  // 9 % 6
  EXPECT_THROW(
      previewer.observe(Tensor::zeros({1, 12, 6}, DType::F32), Tensor::zeros({1, 6, 8, 3}, DType::U8), 3, 4),
      Error);  // 6 channels: not 2x2 patches
  EXPECT_NO_THROW(previewer.observe(tokens, Tensor::zeros({1, 12, 16, 3}, DType::U8), 3, 4));
}

TEST(LatentPreview, PredictedCleanLatents) {
  Tensor x = Tensor::full({2, 3}, DType::F32, 1.0f), v = Tensor::full({2, 3}, DType::F32, 0.5f);
  const Tensor x0 = predicted_clean_latents(x, v, 0.4f);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(x0.data<float>()[i], 0.8f);
}

}  // namespace
}  // namespace fluxrt::pipelines
