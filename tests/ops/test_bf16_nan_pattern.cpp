// SIMD bodies and scalar tails must write the same NaN pattern (torch's 0xFFFF for f32 -> bf16),
// so a result never depends on where in a row the NaN sat.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/linear.h"

namespace fluxrt {
namespace {

constexpr int64_t kN = 37;  // several SIMD widths plus a tail

TEST(Bf16NanPattern, ElementwiseBodyAndTailAgree) {
  for (int64_t pos = 0; pos < kN; ++pos) {
    std::vector<float> v(kN, 1.0f);
    v[pos] = std::numeric_limits<float>::quiet_NaN();
    Tensor x = Tensor::from_vector(v, {1, kN}, DType::BF16);
    Tensor y = ops::scale(x, 2.0f);
    ASSERT_EQ(y.dtype(), DType::BF16);
    const uint16_t* bits = y.data<uint16_t>();
    EXPECT_EQ(bits[pos], kBF16NaNFromF32) << "NaN at " << pos;
    EXPECT_EQ(bits[(pos + 1) % kN], f32_to_bf16(2.0f));
  }
}

TEST(Bf16NanPattern, LinearBodyAndTailAgree) {
  std::vector<float> w(kN * 3, 0.5f);
  Tensor weight = Tensor::from_vector(w, {kN, 3}, DType::BF16);
  auto prepared = ops::prepare_linear(weight);
  std::vector<float> xv = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  Tensor x = Tensor::from_vector(xv, {1, 3}, DType::BF16);
  Tensor y = ops::linear(x, *prepared);
  const uint16_t* bits = y.data<uint16_t>();
  for (int64_t i = 0; i < kN; ++i) EXPECT_EQ(bits[i], kBF16NaNFromF32) << "column " << i;
}

}  // namespace
}  // namespace fluxrt
