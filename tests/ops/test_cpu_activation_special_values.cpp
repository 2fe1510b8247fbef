// The CPU activations on values the random conformance inputs never draw: infinities, NaN, zeros,
// magnitudes around the exp clamp (|x| = 87) and far beyond it, in every position of a row so
// the bf16 pair layout's even and odd lanes, the single-vector loop and the scalar tail all see
// each value. Finite results must match ref within the Transcendental tolerance; a NaN input gives
// NaN (bf16: torch's 0xFFFF pattern); +inf gives +inf. Run under every Highway target this binary
// carries and this CPU supports (the reciprocal and the true-division paths clamp differently).
// bf16 outputs take the cheaper Accuracy::Bf16 math; one test sweeps every finite bf16 input.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers so HWY_TARGETS matches the kernels')
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "conformance_common.h"
#include "for_each_cpu_target.h"
#include "ops/elementwise.h"

namespace fluxrt::test {
namespace {

const std::vector<float>& special_values() {
  static const std::vector<float> v = {0.0f,  -0.0f,  1e-30f, -1e-30f, 1e-3f, -1e-3f, 5.5f,  -5.5f,
                                       20.0f, -20.0f, 86.9f,  -86.9f,  87.0f, -87.0f, 87.5f, -87.5f,
                                       88.8f, -88.8f, 100.0f, -100.0f, 1e10f, -1e10f, 3e38f, -3e38f};
  return v;
}

// A row of length n with `value` at `pos` and ordinary values elsewhere.
Tensor row_with(float value, int64_t pos, int64_t n, DType dt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = 0.37f * static_cast<float>(i % 11) - 1.9f;
  v[pos] = value;
  return Tensor::from_vector(v, {1, n}, DType::F32).to(dt);
}

using UnaryFn = Tensor (*)(const Tensor&);

struct Activation {
  const char* name;
  UnaryFn fn;
};

const std::vector<Activation>& activations() {
  static const std::vector<Activation> a = {
      {"silu", ops::silu}, {"gelu_tanh", ops::gelu_tanh}, {"quick_gelu", ops::quick_gelu}};
  return a;
}

// 61 elements, so that every loop of MapRow runs on both x86 vector widths: on AVX2 (8 lanes)
// three pair steps (48), one single vector (8) and a 5-element tail; on AVX-512 (16 lanes) one
// pair step (32), one single vector (16) and a 13-element tail.
constexpr int64_t kN = 61;

TEST(CpuActivationSpecialValues, FiniteInputsMatchRef) {
  for_each_target([&] {
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      for (const Activation& act : activations()) {
        for (float value : special_values()) {
          if (dt == DType::F16 && std::fabs(value) > 65504.0f) continue;  // not an f16 value
          for (int64_t pos = 0; pos < kN; ++pos) {
            const Tensor x = row_with(value, pos, kN, dt);
            const Tensor r = run_on("ref", [&] { return act.fn(x); });
            const Tensor y = run_on("cpu", [&] { return act.fn(x); });
            ASSERT_TRUE(all_close(y, r, TolClass::Transcendental))
                << act.name << " " << dtype_name(dt) << " x=" << value << " at " << pos;
          }
        }
      }
    }
  });
}

TEST(CpuActivationSpecialValues, NanAndInfinity) {
  for_each_target([&] {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      for (const Activation& act : activations()) {
        for (int64_t pos = 0; pos < kN; ++pos) {
          const std::vector<float> yn =
              run_on("cpu", [&] { return act.fn(row_with(nan, pos, kN, dt)); }).to_vector();
          EXPECT_TRUE(std::isnan(yn[pos])) << act.name << " " << dtype_name(dt) << " NaN at " << pos;
          if (dt == DType::BF16) {
            const Tensor yb = run_on("cpu", [&] { return act.fn(row_with(nan, pos, kN, dt)); });
            EXPECT_EQ(yb.data<uint16_t>()[pos], kBF16NaNFromF32) << act.name << " NaN at " << pos;
          }
          const std::vector<float> yp =
              run_on("cpu", [&] { return act.fn(row_with(inf, pos, kN, dt)); }).to_vector();
          EXPECT_EQ(yp[pos], inf) << act.name << " " << dtype_name(dt) << " +inf at " << pos;
          // -inf: ref's x / (1 + exp(-x)) is -inf / inf = NaN; the kernel's clamped exp gives -inf
          // or a NaN. Either way it must not leak into the neighbours.
          const std::vector<float> ym =
              run_on("cpu", [&] { return act.fn(row_with(-inf, pos, kN, dt)); }).to_vector();
          EXPECT_TRUE(std::isnan(ym[pos]) || ym[pos] == -inf)
              << act.name << " " << dtype_name(dt) << " -inf at " << pos << " gave " << ym[pos];
          for (int64_t i = 0; i < kN; ++i) {
            if (i != pos) {
              EXPECT_TRUE(std::isfinite(ym[i]) && std::isfinite(yn[i]) && std::isfinite(yp[i])) << i;
            }
          }
        }
      }
    }
  });
}

// bf16 results use the cheaper Accuracy::Bf16 math (degree-3 exp, reciprocal without its Newton
// step): every finite bf16 value, as input to each activation and as SwiGLU's gate, must stay
// within the bf16 tolerance of ref. The 65536 patterns run as one row, so every lane position
// and the tail see values of every magnitude.
// Distance in bf16 steps between two results of the same sign (a large number for opposite signs).
int64_t bf16_steps(uint16_t a, uint16_t b) {
  if ((a ^ b) & 0x8000u) return ((a | b) & 0x7FFFu) == 0 ? 0 : int64_t{1} << 16;
  return std::abs(static_cast<int64_t>(a & 0x7FFFu) - static_cast<int64_t>(b & 0x7FFFu));
}

// Elements of y more than one bf16 step from ref's rounded r, where |r| >= 1e-10: further out, ref's
// GELU-tanh, 0.5 x (1 + tanh(u)) in f64, loses its digits to the cancellation in 1 + tanh(u) (at
// |r| = 1e-15 it is off by tens of percent), and the kernels' clamped exp gives 0 or a tiny value
// for results that underflow anyway. The approximations' error (below 5e-4 relative, simd-inl.h)
// is under bf16's half step, so y can only land on r's neighbour when the exact value sits near a
// rounding boundary.
// Also prints how many are exactly one step off, the figure a cheaper approximation moves.
int64_t beyond_one_step(const Tensor& y, const Tensor& r, const char* name) {
  const uint16_t* yb = y.data<uint16_t>();
  const uint16_t* rb = r.data<uint16_t>();
  int64_t beyond = 0, one = 0, checked = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (std::fabs(bf16_to_f32(rb[i])) < 1e-10f) continue;
    const int64_t steps = bf16_steps(yb[i], rb[i]);
    ++checked;
    one += steps == 1;
    beyond += steps > 1;
  }
  std::printf("%s: %lld of %lld results one bf16 step from ref\n", name, static_cast<long long>(one),
              static_cast<long long>(checked));
  return beyond;
}

TEST(CpuActivationSpecialValues, EveryBf16InputMatchesRef) {
  std::vector<uint16_t> bits;
  for (uint32_t b = 0; b < 0x10000u; ++b)
    if (std::isfinite(bf16_to_f32(static_cast<uint16_t>(b)))) bits.push_back(static_cast<uint16_t>(b));
  Tensor x = Tensor::empty({1, static_cast<int64_t>(bits.size())}, DType::BF16);
  std::memcpy(x.raw_data(), bits.data(), bits.size() * 2);
  const Tensor up = row_with(0.75f, 0, x.size(1), DType::BF16);
  for_each_target([&] {
    for (const Activation& act : activations()) {
      const Tensor r = run_on("ref", [&] { return act.fn(x); });
      const Tensor y = run_on("cpu", [&] { return act.fn(x); });
      EXPECT_TRUE(all_close(y, r, TolClass::Transcendental)) << act.name;
      EXPECT_EQ(beyond_one_step(y, r, act.name), 0) << act.name;
    }
    const Tensor r = run_on("ref", [&] { return ops::silu_mul(x, up); });
    const Tensor y = run_on("cpu", [&] { return ops::silu_mul(x, up); });
    EXPECT_TRUE(all_close(y, r, TolClass::Transcendental)) << "silu_mul";
    EXPECT_EQ(beyond_one_step(y, r, "silu_mul"), 0) << "silu_mul";
  });
}

// SwiGLU through the two-input path: special values in the gate, ordinary values in up.
TEST(CpuActivationSpecialValues, SwigluGateMatchesRef) {
  for_each_target([&] {
    for (DType dt : {DType::F32, DType::BF16}) {
      for (float value : special_values()) {
        for (int64_t pos = 0; pos < kN; ++pos) {
          const Tensor gate = row_with(value, pos, kN, dt), up = row_with(0.75f, (pos + 3) % kN, kN, dt);
          const Tensor r = run_on("ref", [&] { return ops::silu_mul(gate, up); });
          const Tensor y = run_on("cpu", [&] { return ops::silu_mul(gate, up); });
          ASSERT_TRUE(all_close(y, r, TolClass::Transcendental))
              << dtype_name(dt) << " gate=" << value << " at " << pos;
        }
      }
    }
  });
}

}  // namespace
}  // namespace fluxrt::test
