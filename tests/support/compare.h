#pragma once
// The one comparison helper behind docs/numerics.md: statistics of a result against a reference
// and gtest assertions for each tolerance class. Tests never invent their own tolerances.
//
//   EXPECT_TRUE(fluxrt::test::all_close(y, ref, fluxrt::test::TolClass::Norm));
//
// The reference is normally the ref backend's output in the test dtype (f64 arithmetic, rounded
// once) or an f64 tensor; inputs were rounded to the test dtype before the oracle saw them.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace fluxrt::test {

struct CompareStats {
  int64_t count = 0;
  double max_abs = 0;       // max |y - r|
  double max_rel = 0;       // max |y - r| / |r| over elements with r != 0
  double nmse = 0;          // sum (y - r)^2 / sum r^2
  double rel_l2 = 0;        // ||y - r|| / ||r||  (= sqrt(nmse))
  double cosine = 1;        // <y, r> / (||y|| ||r||)
  int64_t violations = 0;   // elements outside the mixed bound (when one was given)
  int64_t nan_mismatch = 0; // NaN in one tensor but not the other at the same index
  // The element with the largest violation of the mixed bound (or, without a bound, the largest
  // |y - r|): flat index, multi-index text, values.
  int64_t worst_index = -1;
  std::string worst_where;
  double worst_actual = 0, worst_expected = 0;
  std::string str() const;
};

// Element-wise statistics. When atol/rtol are > 0 an element violates if
// |y - r| > atol + rtol * |r|, unless `half_ulp_dtype` is BF16 and y is within one bf16 ulp of r
// rounded to bf16 (the bf16 output rule of docs/numerics.md).
CompareStats compare(const Tensor& actual, const Tensor& expected, double atol = 0, double rtol = 0,
                     DType half_ulp_dtype = DType::F64);

enum class TolClass {
  Elementwise,     // add, mul, modulate, residual, scale
  Transcendental,  // element-wise with exp/tanh (GELU, SiLU, SwiGLU)
  Norm,            // RMSNorm, LayerNorm, AdaLN, GroupNorm, softmax
  Rope,
  Gemm,            // linear / convolution
  Attention,       // f32 only here; half types use attention_close()
  ModuleGolden,    // block/encoder/VAE vs reference dumps
  Exact,           // data movement: bitwise equal values
};

struct Tolerance {
  enum class Metric { Mixed, Nmse, RelL2, Exact } metric = Metric::Mixed;
  double atol = 0, rtol = 0;  // Mixed
  double bound = 0;           // Nmse / RelL2
  double min_cosine = 0;      // RelL2 (module goldens in f32)
};

// The numerics.md table. `dtype` is the dtype of the result being checked.
Tolerance tolerance_for(TolClass cls, DType dtype);

// gtest-friendly: success, or a message with the stats and the worst element.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, TolClass cls);
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, const Tolerance& tol,
                                     DType dtype);

// The flash-attention rule for half types: the kernel's NMSE against the f64 oracle may be at most
// `factor` times the NMSE of a naive implementation in the same dtype (plus a tiny floor so that
// an exact naive result does not demand exactness).
::testing::AssertionResult attention_close(const Tensor& actual, const Tensor& naive_same_dtype,
                                           const Tensor& oracle, double factor = 2.0);

}  // namespace fluxrt::test
