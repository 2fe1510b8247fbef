// RoPE tables: FLUX multi-axis (f64 angles rounded to f32, as diffusers) and Qwen3 rotate-half
// (f32 throughout, as transformers).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/rope.h"

namespace fluxrt::ops {
namespace {

Tensor ids_of(const std::vector<float>& v, int64_t L, int64_t A) { return Tensor::from_vector(v, {L, A}, DType::I64); }

TEST(Rope, Flux1AxesLadders) {
  // Token 0: text (all zeros); token 1: image patch (0, 3, 7).
  const RopeTable t = rope_flux1(ids_of({0, 0, 0, 0, 3, 7}, 2, 3));
  ASSERT_EQ(t.cos.shape(), Shape({2, 64}));
  const float* c = t.cos.data<float>();
  const float* s = t.sin.data<float>();
  for (int e = 0; e < 64; ++e) {
    EXPECT_EQ(c[e], 1.0f);
    EXPECT_EQ(s[e], 0.0f);
  }
  // Entries 0..7: axis 0 (position 0); 8..35: axis 1 (n = 56, position 3); 36..63: axis 2 (position 7).
  for (int e = 0; e < 64; ++e) {
    const int axis = e < 8 ? 0 : e < 36 ? 1 : 2;
    const int j = e < 8 ? e : e < 36 ? e - 8 : e - 36;
    const double n = axis == 0 ? 16 : 56, pos = axis == 0 ? 0 : axis == 1 ? 3 : 7;
    const double angle = pos * (1.0 / std::pow(10000.0, 2.0 * j / n));
    EXPECT_EQ(c[64 + e], static_cast<float>(std::cos(angle))) << e;
    EXPECT_EQ(s[64 + e], static_cast<float>(std::sin(angle))) << e;
  }
}

TEST(Rope, Flux2FourAxesAndBatchedIds) {
  // [B = 2, L = 1, 4]: text token 511 (0, 0, 0, 511) and a reference-image patch (10, 5, 9, 0).
  const Tensor ids = Tensor::from_vector({0, 0, 0, 511, 10, 5, 9, 0}, {2, 1, 4}, DType::I64);
  const RopeTable t = rope_flux2(ids);
  ASSERT_EQ(t.cos.shape(), Shape({2, 1, 64}));
  const float* c = t.cos.data<float>();
  const float* s = t.sin.data<float>();
  const double pos[2][4] = {{0, 0, 0, 511}, {10, 5, 9, 0}};
  for (int b = 0; b < 2; ++b)
    for (int e = 0; e < 64; ++e) {
      const int axis = e / 16, j = e % 16;
      const double angle = pos[b][axis] * (1.0 / std::pow(2000.0, 2.0 * j / 32.0));
      EXPECT_EQ(c[b * 64 + e], static_cast<float>(std::cos(angle)));
      EXPECT_EQ(s[b * 64 + e], static_cast<float>(std::sin(angle)));
    }
}

TEST(Rope, RotateHalfIsF32LikeTransformers) {
  const RopeTable t = rope_rotate_half(512, 128);
  ASSERT_EQ(t.cos.shape(), Shape({512, 64}));
  const float* c = t.cos.data<float>();
  const float* s = t.sin.data<float>();
  for (int j = 0; j < 64; ++j) {
    EXPECT_EQ(c[j], 1.0f);
    EXPECT_EQ(s[j], 0.0f);
  }
  for (int pos : {1, 77, 511})
    for (int j : {0, 1, 31, 63}) {
      const float inv = 1.0f / std::pow(1e6f, static_cast<float>(2 * j) / 128.0f);
      const float angle = inv * static_cast<float>(pos);
      EXPECT_EQ(c[pos * 64 + j], static_cast<float>(std::cos(static_cast<double>(angle))));
      EXPECT_EQ(s[pos * 64 + j], static_cast<float>(std::sin(static_cast<double>(angle))));
    }
  // Offset start: rows equal the full table's rows.
  const RopeTable u = rope_rotate_half(10, 128, kQwen3RopeTheta, 100);
  EXPECT_EQ(u.cos.to_vector()[5 * 64 + 7], c[105 * 64 + 7]);
}

TEST(Rope, RejectsMismatchedAxes) {
  EXPECT_THROW(rope_flux2(ids_of({0, 0, 0}, 1, 3)), Error);
  const int64_t odd[] = {3, 5};
  EXPECT_THROW(rope_flux(ids_of({0, 0}, 1, 2), odd, 1e4), Error);
  EXPECT_THROW(rope_rotate_half(4, 7), Error);
}

}  // namespace
}  // namespace fluxrt::ops
