// Flux1Config::shared_block_weights (synthetic benchmarks of the real shapes): the preset suffix,
// the weights bound once per block kind (weight_bytes() drops by exactly the other blocks'
// parameters), a forward that runs every block, and a checkpoint store that refuses the flag.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/tensor.h"
#include "models/flux/flux1_config.h"
#include "models/flux/flux1_transformer.h"
#include "models/weight_binder.h"

namespace fluxrt::models {
namespace {

Flux1Config small_config(int64_t double_blocks, int64_t single_blocks) {
  Flux1Config c;
  c.hidden = 128;
  c.heads = 1;
  c.head_dim = 128;
  c.double_blocks = double_blocks;
  c.single_blocks = single_blocks;
  c.context_dim = 16;
  c.pooled_dim = 8;
  c.mlp_hidden = 256;
  return c;
}

TEST(Flux1SharedBlocks, PresetSuffix) {
  const Flux1Config dev = flux1_preset(std::string("flux.1-dev") + kFlux1SharedBlocksSuffix);
  EXPECT_TRUE(dev.shared_block_weights);
  EXPECT_EQ(dev.variant, "flux.1-dev");
  EXPECT_TRUE(dev.guidance);
  EXPECT_EQ(dev.double_blocks, 19);
  EXPECT_EQ(dev.single_blocks, 38);
  EXPECT_EQ(dev.parameter_count(), flux1_preset("flux.1-dev").parameter_count());
  EXPECT_FALSE(flux1_preset(std::string("flux.1-schnell") + kFlux1SharedBlocksSuffix).guidance);
  EXPECT_FALSE(flux1_preset("flux.1-schnell").shared_block_weights);
  EXPECT_THROW(flux1_preset(std::string("flux.1-pro") + kFlux1SharedBlocksSuffix), Error);
}

TEST(Flux1SharedBlocks, OneWeightSetPerBlockKind) {
  const Flux1Config own = small_config(3, 2);
  Flux1Config shared = own;
  shared.shared_block_weights = true;
  const auto a = Flux1Transformer::synthetic(own, 7);
  const auto b = Flux1Transformer::synthetic(shared, 7);
  // bf16: 2 bytes per parameter; the shared model holds the weights of 1 double + 1 single block.
  const int64_t extra_params = own.parameter_count() - small_config(1, 1).parameter_count();
  EXPECT_EQ(a->weight_bytes() - b->weight_bytes(), static_cast<size_t>(2 * extra_params));

  const int64_t li = 16, lt = 8;
  const Tensor x = Tensor::full({1, li, 64}, DType::BF16, 0.5);
  const Tensor ctx = Tensor::full({1, lt, 16}, DType::BF16, 0.25);
  const Tensor pooled = Tensor::full({1, 8}, DType::BF16, 0.1);
  const Tensor y = b->forward(x, Tensor::zeros({li, 3}, DType::F32), ctx, Tensor::zeros({lt, 3}, DType::F32), pooled,
                              Tensor::full({1}, DType::F32, 0.5), Tensor::full({1}, DType::F32, 3.5));
  ASSERT_EQ(y.shape(), Shape({1, li, 64}));
  const Tensor yf = y.to(DType::F32);
  for (int64_t i = 0; i < yf.numel(); ++i) ASSERT_TRUE(std::isfinite(yf.data<float>()[i])) << i;

  EXPECT_THROW(Flux1Transformer::from_store(TensorStore(), shared), Error);
}

}  // namespace
}  // namespace fluxrt::models
