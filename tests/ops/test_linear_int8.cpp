// W8A8 linear (backend/cpu/linear_int8_cpu.h, FLUXRT_LINEAR_IMPL=w8a8): the per-token
// quantization against its scalar definition on every compiled SIMD target, the linear against the
// exact int8 arithmetic on the same quantized values (every epilogue, M across the 256-row
// blocks), its error against the f32 linear, and which weights it takes over.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "backend/cpu/linear_cpu.h"
#include "backend/cpu/linear_int8_cpu.h"
#include "backend/cpu/onednn_util.h"
#include "core/quant.h"
#include "for_each_cpu_target.h"
#include "ops/linear.h"
#include "support/compare.h"
#include "support/quantized_weight.h"
#include "support/random_tensor.h"

namespace fluxrt {
namespace {

using test::random_normal;

// What quantize_rows_int8 promises, one row at a time in scalar code.
void expect_quantized_rows(const Tensor& x, int levels = 127) {
  const int64_t M = x.size(0), K = x.size(1);
  std::vector<int8_t> q(M * K);
  std::vector<float> s(M);
  backend::quantize_rows_int8(x, q.data(), s.data(), levels);
  const std::vector<float> v = x.contiguous().to_vector();
  for (int64_t m = 0; m < M; ++m) {
    float amax = 0;
    bool finite = true;
    for (int64_t k = 0; k < K; ++k) {
      finite = finite && std::isfinite(v[m * K + k]);
      amax = std::max(amax, std::fabs(v[m * K + k]));
    }
    if (!finite) {
      EXPECT_TRUE(std::isnan(s[m])) << "row " << m;
      continue;
    }
    const float lv = static_cast<float>(levels);
    ASSERT_EQ(s[m], amax > 0 ? amax / lv : 1.0f) << "row " << m;
    const float inv = amax > 0 ? lv / amax : 0.0f;
    for (int64_t k = 0; k < K; ++k)
      ASSERT_EQ(q[m * K + k], static_cast<int8_t>(std::nearbyint(v[m * K + k] * inv)))
          << "row " << m << " col " << k;
  }
}

TEST(Int8Quantize, RowsMatchTheScalarDefinitionOnEveryTarget) {
  test::for_each_target([] {
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (int64_t K : {1, 61, 256, 3072 + 5}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dt) << " K" << K);
        Tensor x = random_normal({5, K}, DType::F32, static_cast<uint64_t>(K));
        std::vector<float> v = x.to_vector();
        for (int64_t k = 0; k < K; ++k) v[1 * K + k] = 0.0f;  // a zero row
        v[2 * K + K / 2] = 40.0f;                             // an outlier
        v[3 * K + K - 1] = std::numeric_limits<float>::infinity();
        v[4 * K] = std::numeric_limits<float>::quiet_NaN();
        expect_quantized_rows(Tensor::from_vector(v, {5, K}, dt));
        expect_quantized_rows(Tensor::from_vector(v, {5, K}, dt), 63);
      }
    // Strided rows (a view into a wider tensor).
    expect_quantized_rows(random_normal({7, 300}, DType::BF16, 9).slice(1, 10, 210));
  });
}

struct Int8Case {
  int64_t m, k, n;
  const char* variant;  // "", "bias", "gelu_bias", "silu", "gated_inplace", "gated_f32_residual"
};

// y from the quantized values in double: s_x[m] s_w[n] sum_k qx qw, then bias, act and the gate.
Tensor exact_int8(const Tensor& x, const Tensor& w, const Tensor& bias, ops::Activation act,
                  const Tensor& gate, const Tensor& residual) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  std::vector<int8_t> qx(M * K), qw(N * K);
  std::vector<float> sx(M), sw(N);
  backend::quantize_rows_int8(x, qx.data(), sx.data());
  backend::quantize_weight_int8(w, qw.data(), sw.data());
  const std::vector<float> b = bias.defined() ? bias.to_vector() : std::vector<float>(N, 0.0f);
  const std::vector<float> g = gate.defined() ? gate.to_vector() : std::vector<float>();
  const std::vector<float> r = residual.defined() ? residual.contiguous().to_vector() : std::vector<float>();
  std::vector<float> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += int64_t{qx[m * K + k]} * qw[n * K + k];
      double v = static_cast<double>(sx[m]) * sw[n] * static_cast<double>(acc) + b[n];
      if (act == ops::Activation::GeluTanh)
        v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      if (act == ops::Activation::Silu) v = v / (1 + std::exp(-v));
      if (!g.empty()) v = r[m * N + n] + g[n] * v;
      y[m * N + n] = static_cast<float>(v);
    }
  return Tensor::from_vector(y, {M, N}, DType::F32);
}

class W8A8 : public ::testing::Test {
 protected:
  void SetUp() override { setenv("FLUXRT_LINEAR_IMPL", "w8a8", 1); }
  void TearDown() override { unsetenv("FLUXRT_LINEAR_IMPL"); }
};

TEST_F(W8A8, EqualsTheExactInt8Arithmetic) {
  const Int8Case cases[] = {
      {1, 64, 37, ""},            // one row (a modulation linear), N not a multiple of 16
      {7, 192, 19, "bias"},       // the demo model's width
      {13, 61, 50, "gelu_bias"},  // K not a multiple of any vector
      {300, 256, 530, "silu"},    // one 256-row block and a 44-row tail
      {300, 128, 70, "gated_inplace"},
      {20, 3072, 40, "gated_f32_residual"},
  };
  for (DType dt : {DType::BF16, DType::F32})
    for (const Int8Case& c : cases) {
      SCOPED_TRACE(testing::Message()
                   << dtype_name(dt) << " M" << c.m << " K" << c.k << " N" << c.n << " " << c.variant);
      const uint64_t seed = static_cast<uint64_t>(c.m * 7919 + c.k * 31 + c.n);
      const std::string variant = c.variant;
      const Tensor w = random_normal({c.n, c.k}, dt, seed, 0.0, 0.05);
      const Tensor bias =
          variant.find("bias") != std::string::npos ? random_normal({c.n}, DType::F32, seed + 1) : Tensor();
      const ops::Activation act = variant.find("gelu") != std::string::npos   ? ops::Activation::GeluTanh
                                  : variant.find("silu") != std::string::npos ? ops::Activation::Silu
                                                                              : ops::Activation::None;
      const Tensor x = random_normal({c.m, c.k}, dt, seed + 2);
      const bool gated = variant.find("gated") != std::string::npos;
      const Tensor gate = gated ? random_normal({c.n}, dt, seed + 3) : Tensor();
      const DType rdt = variant.find("f32_residual") != std::string::npos ? DType::F32 : dt;
      const Tensor residual = gated ? random_normal({c.m, c.n}, rdt, seed + 4) : Tensor();

      auto prepared = ops::prepare_linear(w, bias);
      ASSERT_EQ(backend::describe_linear_cpu(*prepared).rfind("onednn-int8 w8a8", 0), 0u)
          << backend::describe_linear_cpu(*prepared);
      Tensor y;
      if (gated && rdt == dt) {
        y = residual.clone();
        ops::linear_gated_residual_into(x, *prepared, gate, y, y, act);
      } else if (gated) {
        y = Tensor::empty({c.m, c.n}, dt);
        ops::linear_gated_residual_into(x, *prepared, gate, residual, y, act);
      } else {
        y = ops::linear(x, *prepared, act);
      }
      // The residual as the kernel sees it: in y's dtype.
      const Tensor expect = exact_int8(x, w, bias, act, gate, gated ? residual.to(dt) : Tensor());
      EXPECT_TRUE(test::all_close(y, expect, test::TolClass::Gemm));
    }
  EXPECT_EQ(backend::onednn::reference_primitive_count(), 0);
}

// Per-token activations and per-row weights in int8: the error against the f32 linear on FLUX
// widths, the figures docs/quantization.md quotes. For normal values the rounding steps are
// ~4.5 sigma / levels, so ~1% from the activations and ~1% (127 levels, VNNI / AMX) or ~2% (63,
// AVX2) from the weights; a row with an outlier 30x its RMS has 7x coarser steps.
TEST_F(W8A8, ErrorAgainstTheF32Linear) {
  const double weight_part = backend::int8_weight_levels() == 127 ? 0.01 : 0.02;
  for (int64_t K : {int64_t{3072}, int64_t{9216}})
    for (bool outliers : {false, true}) {
      const Tensor w = random_normal({64, K}, DType::F32, 11, 0.0, 0.02);
      std::vector<float> xv = random_normal({48, K}, DType::F32, 12).to_vector();
      if (outliers)
        for (int64_t m = 0; m < 48; ++m) xv[m * K + m] = 30.0f;
      const Tensor x = Tensor::from_vector(xv, {48, K}, DType::F32);
      const Tensor y = ops::linear(x, *ops::prepare_linear(w, Tensor()));
      unsetenv("FLUXRT_LINEAR_IMPL");
      const Tensor ref = ops::linear(x, *ops::prepare_linear(w, Tensor()));
      setenv("FLUXRT_LINEAR_IMPL", "w8a8", 1);
      const std::vector<float> a = y.to_vector(), b = ref.to_vector();
      double se = 0, sr = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        se += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
        sr += static_cast<double>(b[i]) * b[i];
      }
      const double rel = std::sqrt(se / sr);
      std::printf("w8a8 (weights %d levels) vs f32 linear, K=%lld%s: rel-L2 %.4f\n",
                  backend::int8_weight_levels(), static_cast<long long>(K),
                  outliers ? ", 30x outlier per row" : "", rel);
      const double bound = 1.5 * std::hypot(0.01 * (outliers ? 7.0 : 1.0), weight_part);
      EXPECT_LT(rel, bound);
      EXPECT_GT(rel, 1e-3) << "the int8 path did not run";
    }
}

// Q8_0 (and fp8) weights are requantized per row and run in int8, keeping one byte per weight
// and no dense copy; the 2-6 bit types keep their own path.
TEST_F(W8A8, TakesQ8_0WeightsAndLeavesTheSmallerTypes) {
  const int64_t N = 40, K = 256;
  const Tensor wf = random_normal({N, K}, DType::F32, 21, 0.0, 0.05);
  auto quantized = [&](QuantType type) { return test::quantize_weight(type, wf); };
  const QuantizedMatrix q8 = quantized(QuantType::Q8_0);
  auto p = ops::prepare_linear_quantized(q8, Tensor());
  ASSERT_EQ(backend::describe_linear_cpu(*p).rfind("onednn-int8 w8a8", 0), 0u)
      << backend::describe_linear_cpu(*p);
  EXPECT_EQ(p->weight.stride(0), 0) << "no dense copy of the weight";
  ASSERT_TRUE(p->quantized != nullptr);
  EXPECT_FALSE(p->quantized->bytes.defined()) << "the int8 copy replaces the Q8_0 bytes";
  EXPECT_EQ(p->quantized->nbytes(), q8.nbytes());
  const Tensor x = random_normal({9, K}, DType::BF16, 22);
  const Tensor y = ops::linear(x, *p);
  EXPECT_TRUE(test::all_close(
      y, exact_int8(x, dequantize_ref(q8), Tensor(), ops::Activation::None, Tensor(), Tensor()),
      test::TolClass::Gemm));
  auto p4 = ops::prepare_linear_quantized(quantized(QuantType::Q4_0), Tensor());
  EXPECT_EQ(backend::describe_linear_cpu(*p4).find("int8"), std::string::npos)
      << backend::describe_linear_cpu(*p4);
}

TEST_F(W8A8, NanRowsStayNanAndBadWeightsAreRefused) {
  const Tensor w = random_normal({16, 64}, DType::F32, 31);
  auto p = ops::prepare_linear(w, Tensor());
  std::vector<float> xv = random_normal({3, 64}, DType::F32, 32).to_vector();
  xv[64 + 5] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> y = ops::linear(Tensor::from_vector(xv, {3, 64}, DType::F32), *p).to_vector();
  for (int64_t n = 0; n < 16; ++n) {
    EXPECT_TRUE(std::isfinite(y[n]));
    EXPECT_TRUE(std::isnan(y[16 + n]));
    EXPECT_TRUE(std::isfinite(y[32 + n]));
  }
  std::vector<float> wv = w.to_vector();
  wv[7] = std::numeric_limits<float>::infinity();
  try {
    ops::prepare_linear(Tensor::from_vector(wv, {16, 64}, DType::F32), Tensor());
    ADD_FAILURE() << "an inf weight was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inf or NaN"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fluxrt
