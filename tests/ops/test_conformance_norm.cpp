// Conformance of the normalisation ops (AdaLN, LayerNorm, RMSNorm) on every backend against ref.
#include <cmath>
#include <limits>
#include <vector>

#include "conformance_common.h"
#include "ops/elementwise.h"
#include "ops/norm.h"

namespace fluxrt::test {
namespace {

std::vector<std::vector<int64_t>> edge_rows(int64_t rows) {
  std::vector<std::vector<int64_t>> s;
  for (int64_t d : kEdgeSizes) s.push_back({rows, d});
  return s;
}

// ---- AdaLN modulate: LN(x) * (1 + scale) + shift, shift/scale chunks of a [B, 6D] vector ----

class AdalnModulate : public ::testing::TestWithParam<OpCase> {};

TEST_P(AdalnModulate, MatchesRef) {
  const OpCase& c = GetParam();
  const int64_t B = c.dims[0], D = c.dims[2];
  Tensor x = c.variant == "strided"  ? random_strided(c.shape(), c.dtype, 11)
             : c.variant == "offset" ? random_normal(c.shape(), c.dtype, 11, 100.0, 1.0)
                                     : random_normal(c.shape(), c.dtype, 11, 0.3, 2.0);
  // A massive activation in channel 0 (DiTs have them): the kernels' one-pass statistics are
  // shifted by x[0], so this is their worst case.
  if (c.variant == "outlier" && c.dims[2] > 1) x.narrow(2, 0, 1).fill(-300.0);
  const Tensor mod = random_normal({B, 6 * D}, c.dtype, 12, 0.0, 0.5);  // shift, scale, gate, ...
  const Tensor shift = mod.narrow(1, 0, D), scale = mod.narrow(1, D, D);
  const Tensor r = run_on("ref", [&] { return ops::adaln_modulate(x, shift, scale, 1e-6f); });
  const Tensor y = run_on(c.backend, [&] { return ops::adaln_modulate(x, shift, scale, 1e-6f); });
  EXPECT_TRUE(all_close(y, r, TolClass::Norm));
}

std::vector<OpCase> adaln_cases() {
  std::vector<std::vector<int64_t>> shapes{{1, 5, 64}, {2, 3, 96}, {2, 37, 3072}};
  for (int64_t d : kEdgeSizes) shapes.push_back({2, 3, d});
  auto cases = make_cases(shapes, {"B", "L", "D"}, {DType::F32, DType::BF16, DType::F16},
                          {"", "strided", "offset", "outlier"});
  // One real FLUX shape in the default suite (text + image tokens of a 1024px image, klein-4B).
  auto big = make_cases({{1, 4608, 3072}}, {"B", "L", "D"}, {DType::BF16});
  cases.insert(cases.end(), big.begin(), big.end());
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Conformance, AdalnModulate, ::testing::ValuesIn(adaln_cases()), case_name);

// Numerics contract: the modulation is (1 + scale), so zero shift/scale gives the plain LayerNorm.
TEST(AdalnContract, OnePlusScale) {
  const Tensor x = random_normal({1, 4, 32}, DType::F32, 3);
  const Tensor zero = Tensor::zeros({1, 32}, DType::F32);
  const Tensor y = ops::adaln_modulate(x, zero, zero, 1e-6f);
  const Tensor ln = ops::layer_norm(x, Tensor(), Tensor(), 1e-6f);
  EXPECT_TRUE(all_close(y, ln, TolClass::Norm));
}

TEST(AdalnErrors, NamesOpAndShapes) {
  const Tensor x = Tensor::zeros({1, 4, 32}, DType::F32);
  try {
    ops::adaln_modulate(x, Tensor::zeros({1, 31}, DType::F32), Tensor::zeros({1, 32}, DType::F32));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[adaln_modulate]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[1, 31]"), std::string::npos) << e.what();
  }
}

// ---- LayerNorm with and without affine (CLIP: eps 1e-5, weight and bias) ----

class LayerNorm : public ::testing::TestWithParam<OpCase> {};

TEST_P(LayerNorm, MatchesRef) {
  const OpCase& c = GetParam();
  const int64_t D = c.dims.back();
  Tensor x = c.variant == "strided" ? random_strided(c.shape(), c.dtype, 21)
                                    : random_normal(c.shape(), c.dtype, 21, -0.5, 3.0);
  if (c.variant == "outlier" && D > 1) x.narrow(-1, 0, 1).fill(250.0);  // massive activation in channel 0
  Tensor w, b;
  if (c.variant != "plain" && c.variant != "outlier") {
    w = random_normal({D}, c.dtype, 22, 1.0, 0.2);
    b = random_normal({D}, c.dtype, 23, 0.0, 0.2);
  }
  const Tensor r = run_on("ref", [&] { return ops::layer_norm(x, w, b, 1e-5f); });
  const Tensor y = run_on(c.backend, [&] { return ops::layer_norm(x, w, b, 1e-5f); });
  EXPECT_TRUE(all_close(y, r, TolClass::Norm));
}

std::vector<OpCase> layer_norm_cases() {
  auto shapes = edge_rows(3);
  shapes.push_back({1, 77, 768});  // CLIP-L
  return make_cases(shapes, {"R", "D"}, {DType::F32, DType::BF16, DType::F16},
                    {"affine", "plain", "strided", "outlier"});
}
INSTANTIATE_TEST_SUITE_P(Conformance, LayerNorm, ::testing::ValuesIn(layer_norm_cases()), case_name);

// ---- RMSNorm: rows (T5/Qwen3), per head (FLUX QK norm), T5 rounding, in place ----

class RmsNorm : public ::testing::TestWithParam<OpCase> {};

TEST_P(RmsNorm, MatchesRef) {
  const OpCase& c = GetParam();
  const int64_t D = c.dims.back();
  const Tensor x = c.variant == "strided" ? random_strided(c.shape(), c.dtype, 31)
                                          : random_normal(c.shape(), c.dtype, 31, 0.2, 1.5);
  const Tensor w = c.variant == "noweight" ? Tensor() : random_normal({D}, c.dtype, 32, 1.0, 0.3);
  const auto mode = c.variant == "t5" ? ops::RmsRounding::BeforeWeight : ops::RmsRounding::Once;
  const Tensor r = run_on("ref", [&] { return ops::rms_norm(x, w, 1e-6f, mode); });
  const Tensor y = run_on(c.backend, [&] {
    if (c.variant != "inplace") return ops::rms_norm(x, w, 1e-6f, mode);
    Tensor t = x.clone();
    ops::rms_norm_(t, w, 1e-6f, mode);
    return t;
  });
  EXPECT_TRUE(all_close(y, r, TolClass::Norm));
}

std::vector<OpCase> rms_cases() {
  auto cases = make_cases(edge_rows(5), {"R", "D"}, {DType::F32, DType::BF16, DType::F16},
                          {"", "t5", "noweight", "strided", "inplace"});
  // Per-head QK norm: x [B, L, H, 128], weight [128].
  auto heads = make_cases({{2, 17, 3, 128}, {1, 64, 24, 128}}, {"B", "L", "H", "Dh"},
                          {DType::F32, DType::BF16, DType::F16}, {"", "strided"});
  cases.insert(cases.end(), heads.begin(), heads.end());
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Conformance, RmsNorm, ::testing::ValuesIn(rms_cases()), case_name);

// T5LayerNorm on bf16 rounds the normalised value to bf16 before the weight multiply; the two
// modes must really differ on some element (otherwise the flag would be untested).
TEST(RmsNormContract, T5RoundingDiffersFromSingleRounding) {
  const Tensor x = random_normal({4, 256}, DType::BF16, 41);
  const Tensor w = random_normal({256}, DType::BF16, 42, 1.0, 0.5);
  const Tensor once = ops::rms_norm(x, w, 1e-6f, ops::RmsRounding::Once);
  const Tensor t5 = ops::t5_rms_norm(x, w);
  EXPECT_GT(compare(once, t5).max_abs, 0.0);
}

// T5's intermediate rounding of a bf16 row skips RoundTo's NaN select (cpu_norm.cpp): a row with
// an infinity (inv_rms = 0: inf * 0 = NaN there, zeros elsewhere) or a NaN (NaN everywhere) must
// give ref's NaNs and values, the NaNs as torch's bf16 pattern, at every position of a row that
// covers the pair layout, single vectors and the tail.
TEST(RmsNormContract, T5NonFiniteRowsMatchRef) {
  const int64_t D = 45;
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (int64_t pos = 0; pos < D; ++pos) {
      std::vector<float> v(static_cast<size_t>(3 * D));
      for (size_t i = 0; i < v.size(); ++i) v[i] = 0.31f * static_cast<float>(i % 13) - 1.7f;
      v[static_cast<size_t>(D + pos)] = bad;  // the middle of three rows
      const Tensor x = Tensor::from_vector(v, {3, D}, DType::F32).to(DType::BF16);
      const Tensor w = random_normal({D}, DType::BF16, 43, 1.0, 0.5);
      const Tensor r = run_on("ref", [&] { return ops::t5_rms_norm(x, w); });
      const Tensor y = run_on("cpu", [&] { return ops::t5_rms_norm(x, w); });
      std::vector<float> rv = r.to_vector(), yv = y.to_vector();
      for (size_t i = 0; i < rv.size(); ++i) {
        if (!std::isnan(rv[i])) continue;
        EXPECT_EQ(y.data<uint16_t>()[i], kBF16NaNFromF32)
            << "x=" << bad << " at " << pos << ", element " << i;
        rv[i] = yv[i] = 0.0f;  // the finite rest is compared below
      }
      EXPECT_TRUE(all_close(Tensor::from_vector(yv, {3, D}, DType::F32).to(DType::BF16),
                            Tensor::from_vector(rv, {3, D}, DType::F32).to(DType::BF16), TolClass::Norm))
          << "x=" << bad << " at " << pos;
    }
  }
}

}  // namespace
}  // namespace fluxrt::test
