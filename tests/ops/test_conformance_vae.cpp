// Conformance of the VAE ops (GroupNorm + SiLU, nearest 2x upsampling, 2x2 patchify, latent
// BatchNorm normalisation) on every backend against ref.
#include "conformance_common.h"
#include "ops/vae_ops.h"

namespace fluxrt::test {
namespace {

const std::vector<std::vector<int64_t>> kSmallImages{{1, 32, 4, 4}, {2, 64, 7, 9}, {1, 128, 16, 17}, {1, 32, 1, 1},
                                                    {2, 96, 3, 43}};

// ---- GroupNorm(32, eps 1e-6, affine) with optional fused SiLU ----

class GroupNorm : public ::testing::TestWithParam<OpCase> {};

TEST_P(GroupNorm, MatchesRef) {
  const OpCase& c = GetParam();
  const int64_t C = c.dims[1];
  Tensor x = c.variant == "strided"  ? random_strided(c.shape(), c.dtype, 201)
             : c.variant == "offset" ? random_normal(c.shape(), c.dtype, 201, 50.0, 2.0)
                                     : random_normal(c.shape(), c.dtype, 201, 0.2, 1.5);
  // One huge pixel at the start of every group: the worst case for x[0]-shifted statistics.
  if (c.variant.find("outlier") != std::string::npos) x.narrow(2, 0, 1).narrow(3, 0, 1).fill(-400.0);
  // channels_last: x's memory is [N, H, W, C]; the output keeps that layout (ref through NCHW).
  const bool channels_last = c.variant.rfind("channels_last", 0) == 0;
  if (channels_last) x = ops::to_channels_last(x);
  const Tensor w = random_normal({C}, c.dtype, 202, 1.0, 0.3), b = random_normal({C}, c.dtype, 203, 0.0, 0.3);
  const bool silu = c.variant == "silu" || c.variant == "strided" || c.variant == "channels_last";
  auto f = [&] { return ops::group_norm(x, w, b, 32, 1e-6f, silu); };
  const Tensor r = run_on("ref", f), y = run_on(c.backend, f);
  EXPECT_TRUE(all_close(y, r, TolClass::Norm));
  EXPECT_TRUE(all_close(y,
                        run_on("ref", [&] { return ops::group_norm(x.contiguous(), w, b, 32, 1e-6f, silu); }),
                        TolClass::Norm));
  if (channels_last) {
    EXPECT_TRUE(y.is_channels_last() && r.is_channels_last());
  }
}

std::vector<OpCase> group_norm_cases() {
  auto cases =
      make_cases(kSmallImages, {"N", "C", "H", "W"}, {DType::F32, DType::BF16, DType::F16},
                 {"", "silu", "strided", "offset", "outlier", "channels_last", "channels_last_outlier"});
  // Channel counts around the channels-last kernel's blocks (4 vectors of 8 or 16 lanes) and tails.
  auto edges = make_cases({{1, 96, 9, 11}, {2, 160, 5, 6}, {1, 544, 3, 7}}, {"N", "C", "H", "W"},
                          {DType::F32, DType::BF16}, {"channels_last", "channels_last_outlier"});
  cases.insert(cases.end(), edges.begin(), edges.end());
  auto big = make_cases({{1, 128, 128, 128}}, {"N", "C", "H", "W"}, {DType::BF16}, {"silu", "channels_last"});
  cases.insert(cases.end(), big.begin(), big.end());
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Conformance, GroupNorm, ::testing::ValuesIn(group_norm_cases()), case_name);

TEST(GroupNormErrors, ChannelsNotDivisible) {
  EXPECT_THROW(ops::group_norm(Tensor::zeros({1, 30, 2, 2}, DType::F32), Tensor(), Tensor(), 32), Error);
}

// ---- nearest 2x upsampling (a copy: exact) ----

class Upsample : public ::testing::TestWithParam<OpCase> {};

TEST_P(Upsample, MatchesRefExactly) {
  const OpCase& c = GetParam();
  Tensor x = c.variant == "strided" ? random_strided(c.shape(), c.dtype, 211)
                                    : random_normal(c.shape(), c.dtype, 211);
  if (c.variant == "channels_last") x = ops::to_channels_last(x);
  const Tensor r = run_on("ref", [&] { return ops::upsample_nearest_2x(x); });
  const Tensor y = run_on(c.backend, [&] { return ops::upsample_nearest_2x(x); });
  ASSERT_EQ(y.shape(), Shape({c.dims[0], c.dims[1], 2 * c.dims[2], 2 * c.dims[3]}));
  EXPECT_TRUE(all_close(y, r, TolClass::Exact));
  EXPECT_TRUE(
      all_close(y, run_on("ref", [&] { return ops::upsample_nearest_2x(x.contiguous()); }), TolClass::Exact));
  EXPECT_EQ(y.item({0, 0, 1, 1}), x.item({0, 0, 0, 0}));
  // (A 1x1 image is NCHW too, and then gives an NCHW output.)
  if (c.variant == "channels_last" && !x.is_contiguous()) {
    EXPECT_TRUE(y.is_channels_last() && r.is_channels_last());
  }
}
INSTANTIATE_TEST_SUITE_P(Conformance, Upsample,
                         ::testing::ValuesIn(make_cases(kSmallImages, {"N", "C", "H", "W"},
                                                        {DType::F32, DType::BF16, DType::F16},
                                                        {"", "strided", "channels_last"})),
                         case_name);

// ---- 2x2 patchify / unpatchify: channel c*4 + py*2 + px (flux-reference.md 4.3) ----

TEST(Patchify, ChannelOrderAndRoundTrip) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor x = random_normal({2, 3, 6, 10}, dt, 221);
    const Tensor p = ops::patchify_2x2(x);
    ASSERT_EQ(p.shape(), Shape({2, 12, 3, 5}));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t py = 0; py < 2; ++py)
          for (int64_t px = 0; px < 2; ++px)
            for (int64_t i = 0; i < 3; ++i)
              for (int64_t j = 0; j < 5; ++j)
                ASSERT_EQ(p.item({b, c * 4 + py * 2 + px, i, j}), x.item({b, c, 2 * i + py, 2 * j + px}));
    EXPECT_TRUE(all_close(ops::unpatchify_2x2(p), x, TolClass::Exact));
    // Strided input gives the same result.
    const Tensor xs = x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
    EXPECT_TRUE(all_close(ops::patchify_2x2(xs), p, TolClass::Exact));
  }
  EXPECT_THROW(ops::patchify_2x2(Tensor::zeros({1, 3, 5, 4}, DType::F32)), Error);
}

// ---- latent BatchNorm normalisation (eps 1e-4) and its inverse ----

class LatentNorm : public ::testing::TestWithParam<OpCase> {};

TEST_P(LatentNorm, MatchesRef) {
  const OpCase& c = GetParam();
  const int64_t C = c.dims[1];
  const Tensor x = random_normal(c.shape(), c.dtype, 231, 0.1, 1.8);
  const Tensor mean = random_normal({C}, DType::F32, 232, 0.0, 0.3);
  const Tensor var = random_uniform({C}, DType::F32, 233, 2.9, 3.5);  // measured FLUX.2 range
  for (bool inverse : {false, true}) {
    auto f = [&] {
      return inverse ? ops::latent_denormalize(x, mean, var, 1e-4f) : ops::latent_normalize(x, mean, var, 1e-4f);
    };
    const Tensor r = run_on("ref", f), y = run_on(c.backend, f);
    EXPECT_TRUE(all_close(y, r, TolClass::Elementwise)) << (inverse ? "denormalize" : "normalize");
  }
}
INSTANTIATE_TEST_SUITE_P(Conformance, LatentNorm,
                         ::testing::ValuesIn(make_cases({{1, 128, 4, 4}, {2, 128, 9, 7}, {1, 128, 64, 64}},
                                                        {"N", "C", "H", "W"}, {DType::F32, DType::BF16, DType::F16})),
                         case_name);

TEST(LatentNormContract, RoundTripF32) {
  const Tensor x = random_normal({1, 128, 8, 8}, DType::F32, 241);
  const Tensor mean = random_normal({128}, DType::F32, 242), var = random_uniform({128}, DType::F32, 243, 2.9, 3.5);
  const Tensor back = ops::latent_denormalize(ops::latent_normalize(x, mean, var), mean, var);
  EXPECT_TRUE(all_close(back, x, TolClass::Norm));
}

}  // namespace
}  // namespace fluxrt::test
