#pragma once
// Two generations that must be the same run: equal images and bitwise-equal final latents.
#include <gtest/gtest.h>

#include <cstring>

#include "pipelines/flux2_klein_pipeline.h"

namespace fluxrt::test {

inline void expect_same_generation(const pipelines::GenerateResult& a, const pipelines::GenerateResult& b) {
  ASSERT_EQ(a.images.size(), b.images.size());
  for (size_t i = 0; i < a.images.size(); ++i)
    EXPECT_TRUE(a.images[i].pixels == b.images[i].pixels) << "image " << i << " differs";
  ASSERT_TRUE(a.final_latents.defined() && b.final_latents.defined());
  const Tensor x = a.final_latents.contiguous(), y = b.final_latents.contiguous();
  ASSERT_EQ(x.shape(), y.shape());
  ASSERT_EQ(x.dtype(), y.dtype());
  EXPECT_EQ(0, std::memcmp(x.raw_data(), y.raw_data(), x.nbytes())) << "final latents differ";
}

}  // namespace fluxrt::test
