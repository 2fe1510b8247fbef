// nn::Linear on a quantized weight: the same layer as on its dequantized weight, counting only the
// quantized bytes (the kernels themselves are checked in tests/ops/test_linear_quant.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "core/quant.h"
#include "nn/linear.h"
#include "support/compare.h"
#include "support/quantized_weight.h"
#include "support/random_tensor.h"

namespace fluxrt::nn {
namespace {

TEST(LinearQuantized, EqualsTheDenseLayerAndCountsQuantizedBytes) {
  const Tensor w = test::random_normal({64, 256}, DType::F32, 5, 0.0, 0.06);
  const QuantizedMatrix q = test::quantize_weight(QuantType::Q4_0, w);
  const Tensor bias = test::random_normal({64}, DType::F32, 6);
  const Linear layer = Linear::prepare_quantized(q, bias);
  ASSERT_TRUE(layer.quantized() != nullptr);
  EXPECT_EQ(layer.parameter_bytes(), q.nbytes() + 64 * 4);
  EXPECT_EQ(layer.out_features(), 64);
  EXPECT_EQ(layer.in_features(), 256);
  const Linear dense = Linear::prepare(dequantize_ref(q), bias);
  EXPECT_EQ(dense.quantized(), nullptr);
  const Tensor x = test::random_normal({2, 3, 256}, DType::F32, 7);
  Tensor y = layer(x, Activation::Silu);
  EXPECT_EQ(y.shape(), Shape({2, 3, 64}));
  EXPECT_TRUE(test::all_close(y, dense(x, Activation::Silu), test::TolClass::Gemm));
}

}  // namespace
}  // namespace fluxrt::nn
