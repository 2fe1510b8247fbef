#pragma once
// Shared by test_linear.cpp and test_linear_slow.cpp: one linear case run on a CPU implementation
// and on the f64 reference with the same (already rounded) inputs.
#include <gtest/gtest.h>

#include <string>

#include "backend/cpu/linear_cpu.h"
#include "backend/ref/linear_ref.h"
#include "support/compare.h"
#include "support/random_tensor.h"

namespace fluxrt::test {

struct LinearCase {
  int64_t m, k, n;
  DType dtype = DType::F32;
  // "", "bias", "gelu", "silu", "bias_gelu", "gated", "gated_inplace", "strided", "strided_gated"
  std::string variant;
};

inline std::string linear_case_name(const std::string& impl, const LinearCase& c) {
  std::string s = impl + "_" + std::string(dtype_name(c.dtype)) + "_M" + std::to_string(c.m) + "_K" +
                  std::to_string(c.k) + "_N" + std::to_string(c.n);
  if (!c.variant.empty()) s += "_" + c.variant;
  return s;
}

inline backend::CpuLinearImpl impl_named(const std::string& name) {
  if (name == "amx") return backend::CpuLinearImpl::Amx;
  return name == "packed" ? backend::CpuLinearImpl::Packed : backend::CpuLinearImpl::OneDnn;
}

inline bool has(const std::string& variant, const char* what) { return variant.find(what) != std::string::npos; }

// Runs the case on `impl` and on ref (f32 output for the oracle) and checks the GEMM tolerance.
inline void check_linear_case(const std::string& impl, const LinearCase& c) {
  const uint64_t seed = static_cast<uint64_t>(c.m * 1000003 + c.k * 1009 + c.n);
  // Weights ~ 1/sqrt(K) like a trained layer, so activations stay O(1) through GELU/SiLU.
  const double wscale = 1.0 / std::sqrt(static_cast<double>(c.k));
  const Tensor w = random_normal({c.n, c.k}, c.dtype, seed + 1, 0.0, wscale);
  const bool bias = has(c.variant, "bias");
  const Tensor b = bias ? random_normal({c.n}, c.dtype, seed + 2, 0.0, 0.5) : Tensor();
  // A strided x: rows of a wider buffer (a column slice, as when reading q out of qkv).
  Tensor x = has(c.variant, "strided") ? random_normal({c.m, c.k + 5}, c.dtype, seed + 3).narrow(1, 2, c.k)
                                       : random_normal({c.m, c.k}, c.dtype, seed + 3);
  backend::Activation act = backend::Activation::None;
  if (has(c.variant, "gelu")) act = backend::Activation::GeluTanh;
  if (has(c.variant, "silu")) act = backend::Activation::Silu;
  const bool gated = has(c.variant, "gated");
  const Tensor gate = gated ? random_normal({c.n}, c.dtype, seed + 4) : Tensor();
  const Tensor residual = gated ? random_normal({c.m, c.n}, c.dtype, seed + 5) : Tensor();

  auto prepared = backend::prepare_linear_cpu_with(w, b, impl_named(impl));
  backend::LinearArgs args;
  args.x = x;
  args.w = prepared.get();
  args.activation = act;
  if (has(c.variant, "inplace")) {
    args.y = residual.clone();
    args.residual = args.y;
  } else {
    args.y = Tensor::empty({c.m, c.n}, c.dtype);
    args.residual = residual;
  }
  args.gate = gate;
  backend::linear_cpu(args);

  auto ref_w = backend::prepare_linear_ref(w, b);
  backend::LinearArgs r = args;
  r.w = ref_w.get();
  r.residual = residual;
  r.y = Tensor::empty({c.m, c.n}, DType::F32);
  backend::linear_ref(r);
  if (c.m * c.n < 64 && c.dtype != DType::F32) {
    // A handful of half-precision outputs: their own rounding (up to half an ulp, NMSE ~1e-5 for
    // one element) dominates any NMSE, so check each element with the element-wise bound instead.
    EXPECT_TRUE(all_close(args.y, r.y, tolerance_for(TolClass::Elementwise, c.dtype), c.dtype))
        << backend::describe_linear_cpu(*prepared);
  } else {
    EXPECT_TRUE(all_close(args.y, r.y, TolClass::Gemm)) << backend::describe_linear_cpu(*prepared);
  }
}

}  // namespace fluxrt::test
