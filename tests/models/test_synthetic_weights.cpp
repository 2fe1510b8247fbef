// Synthetic weights must be the same model on every machine: values depend on the seed only,
// never on the thread count, and stay inside the requested range without exact zeros.
#include <gtest/gtest.h>

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/threads.h"
#include "models/synthetic_weights.h"
#include "support/thread_count.h"

namespace fluxrt::models {
namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data<uint8_t>(), b.data<uint8_t>(), a.nbytes()) == 0;
}

TEST(SyntheticWeights, IndependentOfTheThreadCount) {
  // Several 64K-element chunks plus a ragged tail, so the chunks land on different threads.
  const Shape shape{3, 100003};
  test::RestoreThreadCount restore(1);
  const Tensor one_bf16 = synthetic_tensor(shape, DType::BF16, 7, 0.5f);
  const Tensor one_f32 = synthetic_tensor(shape, DType::F32, 7, 0.5f);
  set_num_threads(4);
  const Tensor four_bf16 = synthetic_tensor(shape, DType::BF16, 7, 0.5f);
  const Tensor four_f32 = synthetic_tensor(shape, DType::F32, 7, 0.5f);
  EXPECT_TRUE(same_bytes(one_bf16, four_bf16));
  EXPECT_TRUE(same_bytes(one_f32, four_f32));
  // bf16 is the f32 value rounded.
  for (int64_t i = 0; i < one_f32.numel(); i += 997)
    ASSERT_EQ(one_bf16.data<uint16_t>()[i], f32_to_bf16(one_f32.data<float>()[i])) << i;
}

TEST(SyntheticWeights, RangeCentreAndSeeds) {
  const Tensor a = synthetic_tensor({200000}, DType::F32, 1, 0.25f, 1.0f);
  const Tensor b = synthetic_tensor({200000}, DType::F32, 2, 0.25f, 1.0f);
  double sum = 0;
  int64_t differ = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float v = a.data<float>()[i];
    ASSERT_GE(v, 0.75f) << i;
    ASSERT_LT(v, 1.25f) << i;
    sum += v;
    differ += v != b.data<float>()[i];
  }
  EXPECT_NEAR(sum / a.numel(), 1.0, 2e-3);
  EXPECT_GT(differ, a.numel() * 99 / 100);  // another seed, another tensor
  const Tensor centred = synthetic_tensor({200000}, DType::BF16, 3, 1.0f);
  for (int64_t i = 0; i < centred.numel(); ++i) ASSERT_NE(centred.data<uint16_t>()[i] & 0x7FFF, 0) << i;
}

TEST(SyntheticWeights, OtherDtypesAreAClearError) {
  EXPECT_THROW(synthetic_tensor({4}, DType::F16, 1, 1.0f), Error);
  EXPECT_THROW(synthetic_tensor({4}, DType::I32, 1, 1.0f), Error);
}

}  // namespace
}  // namespace fluxrt::models
