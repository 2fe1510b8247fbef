// pipelines/batch.h: the per-prompt image counts of a batch and their checks, the rows repeated
// per prompt, and the noise of noise groups, which is each group's own torch.randn draw.
#include <gtest/gtest.h>

#include "core/error.h"
#include "pipelines/batch.h"

namespace fluxrt::pipelines {
namespace {

TEST(Batch, ImagesPerPromptFromTheCountOrThePerPromptList) {
  GenerateRequest r;
  r.prompts = {"a", "b"};
  r.images_per_prompt = 3;
  EXPECT_EQ(images_per_prompt(r), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(batch_size(r), 6);
  r.prompt_repeats = {1, 4};
  EXPECT_EQ(images_per_prompt(r), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(batch_size(r), 5);
}

TEST(Batch, RefusesCountsThatDoNotDescribeTheBatch) {
  auto code = [](const GenerateRequest& r) {
    try {
      images_per_prompt(r);
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;  // nothing thrown
  };
  GenerateRequest r;
  r.prompts = {};
  EXPECT_EQ(code(r), ErrorCode::InvalidArgument);
  r.prompts = {"a", "b"};
  r.images_per_prompt = 0;
  EXPECT_EQ(code(r), ErrorCode::InvalidArgument);
  r.images_per_prompt = 1;
  r.prompt_repeats = {1};  // one entry for two prompts
  EXPECT_EQ(code(r), ErrorCode::InvalidArgument);
  r.prompt_repeats = {1, 0};
  EXPECT_EQ(code(r), ErrorCode::InvalidArgument);
  r.prompt_repeats = {1, 2};
  r.noise_groups = {{5, 1}, {6, 1}};  // covers 2 of 3 images
  EXPECT_EQ(code(r), ErrorCode::InvalidArgument);
  r.noise_groups = {{5, 1}, {6, 0}, {7, 2}};
  EXPECT_EQ(code(r), ErrorCode::InvalidArgument);
  r.noise_groups = {{5, 1}, {6, 2}};
  EXPECT_EQ(code(r), ErrorCode::Internal);  // valid
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
  GenerateRequest r;
  r.prompts = {"a", "b"};
  r.prompt_repeats = {2, 1};
  r.noise_groups = {{11, 2}, {12, 1}};
  TorchGenerator unused(0);
  const Shape shape{3, 4, 2, 2};
  const Tensor noise = draw_noise(r, shape, DType::BF16, unused);
  const Tensor first = randn_like_torch({2, 4, 2, 2}, DType::BF16, 11);
  const Tensor second = randn_like_torch({1, 4, 2, 2}, DType::BF16, 12);
  ASSERT_EQ(noise.shape(), shape);
  const uint16_t* n = noise.data<uint16_t>();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(n[i], first.data<uint16_t>()[i]) << i;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(n[32 + i], second.data<uint16_t>()[i]) << i;
  // Without groups: one draw from the request's generator for the whole batch.
  r.noise_groups.clear();
  TorchGenerator own(11);
  const Tensor whole = draw_noise(r, shape, DType::BF16, own);
  const Tensor want = randn_like_torch(shape, DType::BF16, 11);
  for (int i = 0; i < 48; ++i) EXPECT_EQ(whole.data<uint16_t>()[i], want.data<uint16_t>()[i]) << i;
}

}  // namespace
}  // namespace fluxrt::pipelines
