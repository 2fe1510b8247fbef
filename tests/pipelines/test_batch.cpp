// pipelines/batch.h: the prompts, per-prompt image counts and noise groups of a call (one request
// or several batched ones) and their checks, the rows repeated per prompt, and the noise of noise
// groups, which is each request's own torch.randn draw.
#include <gtest/gtest.h>

#include "core/error.h"
#include "pipelines/batch.h"

namespace fluxrt::pipelines {
namespace {

TEST(Batch, OneRequestIsItsPromptListWithItsCountAndNoNoiseGroups) {
  fluxrt::GenerateRequest r;
  r.prompts = {"a", "b"};
  r.images_per_prompt = 3;
  r.seed = 5;
  const CallBatch b = call_batch({{&r, {}}});
  EXPECT_EQ(b.prompts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(b.repeats, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(b.images, 6);
  EXPECT_TRUE(b.noise_groups.empty());  // the request's own generator draws the whole call
}

TEST(Batch, SeveralRequestsKeepTheirCountsAndSeeds) {
  fluxrt::GenerateRequest r1, r2;
  r1.prompts = {"a"};
  r1.images_per_prompt = 2;
  r1.seed = 11;
  r2.prompts = {"b", "c"};
  r2.images_per_prompt = 1;
  r2.seed = 12;
  const CallBatch b = call_batch({{&r1, {}}, {&r2, {}}});
  EXPECT_EQ(b.prompts, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(b.repeats, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(b.images, 4);
  ASSERT_EQ(b.noise_groups.size(), 2u);
  EXPECT_EQ(b.noise_groups[0].seed, 11u);
  EXPECT_EQ(b.noise_groups[0].images, 2);
  EXPECT_EQ(b.noise_groups[1].seed, 12u);
  EXPECT_EQ(b.noise_groups[1].images, 2);
}

TEST(Batch, RefusesCallsThatDoNotDescribeABatch) {
  auto code = [](const std::vector<PlannedRequest>& batch) {
    try {
      call_batch(batch);
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;  // nothing thrown
  };
  EXPECT_EQ(code({}), ErrorCode::InvalidArgument);  // no request
  fluxrt::GenerateRequest ok, r;
  r.prompts = {};
  EXPECT_EQ(code({{&r, {}}}), ErrorCode::InvalidArgument);
  EXPECT_EQ(code({{&ok, {}}, {&r, {}}}), ErrorCode::InvalidArgument);  // one bad request of two
  r.prompts = {"a", "b"};
  r.images_per_prompt = 0;
  EXPECT_EQ(code({{&r, {}}}), ErrorCode::InvalidArgument);
  r.images_per_prompt = 1;
  EXPECT_EQ(code({{&ok, {}}, {&r, {}}}), ErrorCode::Internal);  // valid
}

TEST(Batch, NoiseGroupsMustCoverTheBatch) {
  CallBatch b;
  b.noise_groups = {{5, 1}, {6, 1}};  // covers 2 of 3 images
  TorchGenerator unused(0);
  EXPECT_THROW(draw_noise(b, {3, 4, 2, 2}, DType::BF16, unused), Error);
}

TEST(Batch, RepeatRowsRepeatsEachRowItsCount) {
  Tensor x = Tensor::empty({3, 2}, DType::F32);
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = static_cast<float>(i);
  const Tensor y = repeat_rows(x, {2, 1, 3});
  ASSERT_EQ(y.shape(), (Shape{6, 2}));
  const float want[] = {0, 1, 0, 1, 2, 3, 4, 5, 4, 5, 4, 5};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(y.data<float>()[i], want[i]) << i;
  EXPECT_THROW(repeat_rows(x, {1, 1}), Error);
}

TEST(Batch, NoiseGroupsDrawEachGroupFromItsOwnSeed) {
  fluxrt::GenerateRequest r1, r2;
  r1.prompts = {"a"};
  r1.images_per_prompt = 2;
  r1.seed = 11;
  r2.prompts = {"b"};
  r2.seed = 12;
  const CallBatch batch = call_batch({{&r1, {}}, {&r2, {}}});
  TorchGenerator unused(0);
  const Shape shape{3, 4, 2, 2};
  const Tensor noise = draw_noise(batch, shape, DType::BF16, unused);
  const Tensor first = randn_like_torch({2, 4, 2, 2}, DType::BF16, 11);
  const Tensor second = randn_like_torch({1, 4, 2, 2}, DType::BF16, 12);
  ASSERT_EQ(noise.shape(), shape);
  const uint16_t* n = noise.data<uint16_t>();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(n[i], first.data<uint16_t>()[i]) << i;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(n[32 + i], second.data<uint16_t>()[i]) << i;
  // One request: one draw from the request's generator for the whole call.
  fluxrt::GenerateRequest one;
  one.prompts = {"a", "b"};
  one.images_per_prompt = 1;
  const CallBatch single = call_batch({{&one, {}}});
  ASSERT_EQ(single.images, 2);
  TorchGenerator own(11);
  const Shape two{2, 4, 2, 2};
  const Tensor whole = draw_noise(single, two, DType::BF16, own);
  const Tensor want = randn_like_torch(two, DType::BF16, 11);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(whole.data<uint16_t>()[i], want.data<uint16_t>()[i]) << i;
}

}  // namespace
}  // namespace fluxrt::pipelines
