// Conv2d conformance: the CPU backend (oneDNN) against the f64 reference for the VAE's
// convolutions: 3x3 pad 1, 1x1, stride 2 with the asymmetric (0, 1, 0, 1) padding, nearest 2x
// upsample fused into the input, residual add, odd spatial sizes, batch 2, f32/bf16/f16.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cpu/conv_cpu.h"
#include "backend/cpu/onednn_util.h"
#include "backend/ref/conv_ref.h"
#include "ops/conv.h"
#include "ops/dispatch.h"
#include "ops/vae_ops.h"
#include "support/compare.h"
#include "support/random_tensor.h"

namespace fluxrt::test {
namespace {

struct ConvCase {
  int64_t n, cin, h, w, cout, k;
  DType dtype;
  std::string variant;  // "same", "down", "up", "same_res", "strided_x", "nobias"
};

std::string conv_case_name(const ::testing::TestParamInfo<ConvCase>& info) {
  const ConvCase& c = info.param;
  return std::string(dtype_name(c.dtype)) + "_N" + std::to_string(c.n) + "_C" + std::to_string(c.cin) + "_H" +
         std::to_string(c.h) + "_W" + std::to_string(c.w) + "_O" + std::to_string(c.cout) + "_K" +
         std::to_string(c.k) + "_" + c.variant;
}

ops::Conv2dOptions options_for(const ConvCase& c) {
  if (c.variant.rfind("down", 0) == 0) return ops::Conv2dOptions::downsample();
  if (c.variant.rfind("up", 0) == 0) return ops::Conv2dOptions::upsample_then_same(static_cast<int>(c.k));
  return ops::Conv2dOptions::same(static_cast<int>(c.k));
}

class ConvConformance : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvConformance, CpuMatchesReference) {
  const ConvCase& c = GetParam();
  const uint64_t seed = static_cast<uint64_t>(c.cin * 131 + c.h * 17 + c.w + c.cout * 7);
  const double wscale = 1.0 / std::sqrt(static_cast<double>(c.cin * c.k * c.k));
  const Tensor w = random_normal({c.cout, c.cin, c.k, c.k}, c.dtype, seed, 0.0, wscale);
  const Tensor b = c.variant.find("nobias") == std::string::npos ? random_normal({c.cout}, c.dtype, seed + 1)
                                                                   : Tensor();
  Tensor x = c.variant.find("strided") != std::string::npos
                 ? random_normal({c.n, c.cin, c.h, c.w + 3}, c.dtype, seed + 2).narrow(3, 1, c.w)
                 : random_normal({c.n, c.cin, c.h, c.w}, c.dtype, seed + 2);
  const ops::Conv2dOptions opt = options_for(c);

  auto cpu = backend::prepare_conv2d_cpu(w, b);
  const Shape out = ops::conv2d_output_shape(x, *cpu, opt);
  const Tensor residual = c.variant.find("res") != std::string::npos ? random_normal(out, c.dtype, seed + 3) : Tensor();
  backend::Conv2dArgs a;
  a.x = x;
  a.w = cpu.get();
  a.stride = opt.stride;
  a.pad_top = opt.pad_top, a.pad_bottom = opt.pad_bottom, a.pad_left = opt.pad_left, a.pad_right = opt.pad_right;
  a.upsample_nearest_2x = opt.upsample_nearest_2x;
  a.residual = residual;
  a.y = Tensor::empty(out, c.dtype);
  backend::conv2d_cpu(a);

  auto ref = backend::prepare_conv2d_ref(w, b);
  backend::Conv2dArgs r = a;
  r.w = ref.get();
  r.y = Tensor::empty(out, DType::F32);
  backend::conv2d_ref(r);
  EXPECT_TRUE(all_close(a.y, r.y, TolClass::Gemm)) << backend::describe_conv2d_cpu(*cpu);
}

std::vector<ConvCase> conv_cases() {
  std::vector<ConvCase> v;
  for (DType dt : {DType::F32, DType::BF16}) {
    v.push_back({1, 8, 9, 11, 16, 3, dt, "same"});
    v.push_back({1, 32, 6, 5, 16, 1, dt, "same"});           // 1x1 (nin_shortcut)
    v.push_back({1, 16, 8, 8, 16, 3, dt, "down"});           // even size, asymmetric pad
    v.push_back({1, 8, 9, 7, 8, 3, dt, "down"});             // odd size
    v.push_back({1, 16, 5, 7, 8, 3, dt, "up"});              // decoder Upsample
    v.push_back({2, 16, 7, 6, 24, 3, dt, "same_res"});       // batch 2 + residual
    v.push_back({2, 8, 6, 9, 8, 3, dt, "up_res"});
    v.push_back({1, 3, 13, 10, 16, 3, dt, "same"});          // conv_in from RGB
    v.push_back({1, 16, 7, 7, 3, 3, dt, "same_nobias"});     // conv_out to RGB
    v.push_back({1, 8, 6, 6, 8, 3, dt, "same_strided"});     // non-contiguous x
  }
  v.push_back({1, 16, 6, 7, 16, 3, DType::F16, "same"});
  v.push_back({1, 64, 16, 16, 64, 3, DType::BF16, "same"});  // a VAE-like channel count
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cpu, ConvConformance, ::testing::ValuesIn(conv_cases()), conv_case_name);

TEST(ConvOps, FrontEndShapesAndTables) {
  const Tensor w = random_normal({8, 4, 3, 3}, DType::F32, 1, 0.0, 0.2);
  const Tensor b = random_normal({8}, DType::F32, 2);
  const Tensor x = random_normal({2, 4, 10, 12}, DType::F32, 3);
  auto p = ops::prepare_conv2d(w, b);
  EXPECT_EQ(ops::conv2d(x, *p, ops::Conv2dOptions::same(3)).shape(), (Shape{2, 8, 10, 12}));
  EXPECT_EQ(ops::conv2d(x, *p, ops::Conv2dOptions::downsample()).shape(), (Shape{2, 8, 5, 6}));
  EXPECT_EQ(ops::conv2d(x, *p, ops::Conv2dOptions::upsample_then_same(3)).shape(), (Shape{2, 8, 20, 24}));
  const Tensor y = ops::conv2d(x, *p, ops::Conv2dOptions::upsample_then_same(3));
  ops::ScopedKernelTable force(backend::ref_kernels());
  auto r = ops::prepare_conv2d(w, b);
  EXPECT_TRUE(all_close(y, ops::conv2d(x, *r, ops::Conv2dOptions::upsample_then_same(3)), TolClass::Gemm));
}

// Convolutions execute with their thread's one oneDNN scratchpad (user mode): repeating the
// calls of several shapes, as a VAE decode per request does, allocates no more scratchpad.
TEST(ConvOps, RepeatedCallsAllocateNoScratchpad) {
  const Tensor w = random_normal({16, 8, 3, 3}, DType::F32, 3, 0.0, 0.1);
  auto p = ops::prepare_conv2d(w, Tensor());
  auto run_all = [&] {
    for (int64_t h : {9, 16, 33}) {
      const Tensor x = random_normal({1, 8, h, h + 2}, DType::F32, 4);
      (void)ops::conv2d(x, *p, ops::Conv2dOptions::same(3));
      (void)ops::conv2d(x, *p, ops::Conv2dOptions::downsample());
    }
  };
  run_all();
  const int64_t after_first = backend::onednn::scratchpad_allocations();
  run_all();
  run_all();
  EXPECT_EQ(backend::onednn::scratchpad_allocations(), after_first);
}

// A channels-last input gives a channels-last output with the bits of the NCHW call: oneDNN's
// brgemm convolutions run on that layout either way (NCHW only adds the reorders), and the
// upsample copies whole pixels in the compute dtype instead of widening to f32 first.
TEST(ConvOps, ChannelsLastKeepsLayoutAndGivesTheNchwBits) {
  struct Case {
    int64_t n, cin, h, w, cout, k;
    ops::Conv2dOptions opt;
    bool residual;
    const char* name;
  };
  const std::vector<Case> cases = {
      {1, 32, 9, 11, 32, 3, ops::Conv2dOptions::same(3), false, "same"},
      {2, 32, 7, 6, 48, 3, ops::Conv2dOptions::same(3), true, "batch 2 + residual"},
      {1, 64, 6, 5, 32, 1, ops::Conv2dOptions{}, false, "1x1 shortcut"},
      {1, 32, 8, 10, 32, 3, ops::Conv2dOptions::downsample(), false, "downsample"},
      {1, 32, 5, 7, 32, 3, ops::Conv2dOptions::upsample_then_same(3), false, "upsample"},
      {1, 3, 13, 10, 32, 3, ops::Conv2dOptions::same(3), false, "conv_in from RGB"},
      {1, 32, 7, 7, 3, 3, ops::Conv2dOptions::same(3), false, "conv_out to RGB"},
  };
  for (DType dt : {DType::BF16, DType::F32}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + c.name);
      const Tensor w = random_normal({c.cout, c.cin, c.k, c.k}, dt, 11, 0.0, 0.1);
      auto p = ops::prepare_conv2d(w, random_normal({c.cout}, dt, 12));
      const Tensor x = random_normal({c.n, c.cin, c.h, c.w}, dt, 13);
      const Tensor res =
          c.residual ? random_normal(ops::conv2d_output_shape(x, *p, c.opt), dt, 14) : Tensor();
      const Tensor nchw = ops::conv2d(x, *p, c.opt, res);
      const Tensor x_cl = ops::to_channels_last(x);
      ASSERT_TRUE(x_cl.is_channels_last() && (c.cin == 1 || !x_cl.is_contiguous()));
      const Tensor y = ops::conv2d(x_cl, *p, c.opt, res.defined() ? ops::to_channels_last(res) : Tensor());
      EXPECT_TRUE(y.is_channels_last());
      EXPECT_TRUE(all_close(y, nchw, TolClass::Exact)) << backend::describe_conv2d_cpu(*p);
    }
  }
}

// The lean VAE pass adds conv2's residual in place: y is the residual, channels-last.
TEST(ConvOps, ChannelsLastResidualInPlace) {
  const Tensor w = random_normal({32, 32, 3, 3}, DType::BF16, 21, 0.0, 0.1);
  auto p = ops::prepare_conv2d(w, random_normal({32}, DType::BF16, 22));
  const Tensor x = ops::to_channels_last(random_normal({1, 32, 9, 8}, DType::BF16, 23));
  const Tensor skip = random_normal({1, 32, 9, 8}, DType::BF16, 24);
  const Tensor expected = ops::conv2d(x, *p, ops::Conv2dOptions::same(3), skip);
  Tensor y = ops::to_channels_last(skip.clone());
  ops::conv2d_into(x, *p, ops::Conv2dOptions::same(3), y, y);
  EXPECT_TRUE(all_close(y, expected, TolClass::Exact));
}

TEST(ConvOps, Errors) {
  auto p = ops::prepare_conv2d(random_normal({8, 4, 3, 3}, DType::F32, 1));
  EXPECT_THROW(ops::conv2d(random_normal({1, 5, 8, 8}, DType::F32, 2), *p), Error);  // channels
  EXPECT_THROW(ops::conv2d(random_normal({1, 4, 8}, DType::F32, 2), *p), Error);     // rank
  EXPECT_THROW(ops::conv2d(random_normal({1, 4, 2, 2}, DType::F32, 2), *p), Error);  // smaller than kernel
  EXPECT_THROW(ops::prepare_conv2d(random_normal({8, 4, 3}, DType::F32, 1)), Error);
}

}  // namespace
}  // namespace fluxrt::test
