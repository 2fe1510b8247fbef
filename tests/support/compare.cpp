#include "support/compare.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"

namespace fluxrt::test {
namespace {

std::vector<double> as_f64(const Tensor& t) {
  const Tensor d = t.contiguous().to(DType::F64);
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

std::string unravel(const Shape& shape, int64_t flat) {
  if (flat < 0) return "-";
  std::vector<int64_t> idx(static_cast<size_t>(shape.size()));
  for (int i = shape.size() - 1; i >= 0; --i) {
    idx[static_cast<size_t>(i)] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

// The distance between r (rounded to bf16) and the next bf16 value away from zero.
double bf16_ulp(double r) {
  const uint16_t b = f32_to_bf16(static_cast<float>(r));
  const double v = bf16_to_f32(b);
  const double next = bf16_to_f32(static_cast<uint16_t>(b + 1));
  return std::fabs(next - v);
}

}  // namespace

std::string CompareStats::str() const {
  return fmt::format(
      "n={} max_abs={:.3g} max_rel={:.3g} nmse={:.3g} rel_l2={:.3g} cosine={:.9f} violations={} nan_mismatch={} "
      "worst at {} (flat {}): actual={:.9g} expected={:.9g}",
      count, max_abs, max_rel, nmse, rel_l2, cosine, violations, nan_mismatch, worst_where, worst_index, worst_actual,
      worst_expected);
}

CompareStats compare(const Tensor& actual, const Tensor& expected, double atol, double rtol, DType half_ulp_dtype) {
  CompareStats s;
  FLUXRT_CHECK(actual.shape() == expected.shape(), ErrorCode::InvalidArgument, "[compare] shapes {} and {} differ",
               actual.shape().str(), expected.shape().str());
  const std::vector<double> y = as_f64(actual), r = as_f64(expected);
  s.count = static_cast<int64_t>(y.size());
  const bool bounded = atol > 0 || rtol > 0;
  double err2 = 0, ref2 = 0, act2 = 0, dot = 0, worst_score = -1;
  for (size_t i = 0; i < y.size(); ++i) {
    const double a = y[i], e = r[i];
    if (std::isnan(a) || std::isnan(e)) {
      if (std::isnan(a) != std::isnan(e)) {
        ++s.nan_mismatch;
        if (worst_score < INFINITY) {
          worst_score = INFINITY;
          s.worst_index = static_cast<int64_t>(i);
        }
      }
      continue;
    }
    if (std::isinf(a) || std::isinf(e)) {
      if (a != e) {
        ++s.nan_mismatch;
        worst_score = INFINITY;
        s.worst_index = static_cast<int64_t>(i);
      }
      continue;
    }
    const double d = std::fabs(a - e);
    s.max_abs = std::max(s.max_abs, d);
    if (e != 0) s.max_rel = std::max(s.max_rel, d / std::fabs(e));
    err2 += d * d;
    ref2 += e * e;
    act2 += a * a;
    dot += a * e;
    double score = d;
    if (bounded) {
      const double lim = atol + rtol * std::fabs(e);
      bool ok = d <= lim;
      if (!ok && half_ulp_dtype == DType::BF16) {
        const double rb = bf16_to_f32(f32_to_bf16(static_cast<float>(e)));
        ok = std::fabs(a - rb) <= bf16_ulp(e);
      }
      if (!ok) ++s.violations;
      score = d / lim;
    }
    if (score > worst_score) {
      worst_score = score;
      s.worst_index = static_cast<int64_t>(i);
    }
  }
  s.nmse = ref2 > 0 ? err2 / ref2 : (err2 > 0 ? INFINITY : 0);
  s.rel_l2 = std::sqrt(s.nmse);
  s.cosine = (act2 > 0 && ref2 > 0) ? dot / std::sqrt(act2 * ref2) : (act2 == ref2 ? 1.0 : 0.0);
  if (s.worst_index >= 0) {
    s.worst_where = unravel(actual.shape(), s.worst_index);
    s.worst_actual = y[static_cast<size_t>(s.worst_index)];
    s.worst_expected = r[static_cast<size_t>(s.worst_index)];
  }
  return s;
}

Tolerance tolerance_for(TolClass cls, DType dtype) {
  using M = Tolerance::Metric;
  const bool f32 = dtype == DType::F32 || dtype == DType::F64;
  const bool f16 = dtype == DType::F16;
  auto mixed = [](double t) { return Tolerance{M::Mixed, t, t, 0, 0}; };
  switch (cls) {
    case TolClass::Elementwise:
    case TolClass::Rope: return mixed(f32 ? 1e-6 : f16 ? 1e-3 : 1e-2);
    case TolClass::Transcendental: return mixed(f32 ? 2e-6 : f16 ? 1e-3 : 1e-2);
    case TolClass::Norm: return mixed(f32 ? 1e-5 : f16 ? 1e-3 : 1e-2);
    case TolClass::Gemm:
      return f32 ? Tolerance{M::RelL2, 0, 0, 1e-5, 0} : Tolerance{M::Nmse, 0, 0, f16 ? 1e-6 : 1e-5, 0};
    case TolClass::Attention: return Tolerance{M::Nmse, 0, 0, 1e-7, 0};
    case TolClass::ModuleGolden:
      return f32 ? Tolerance{M::RelL2, 0, 0, 1e-5, 0.9999} : Tolerance{M::RelL2, 0, 0, f16 ? 1e-2 : 2e-2, 0};
    case TolClass::Exact: return Tolerance{M::Exact, 0, 0, 0, 0};
  }
  return {};
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, const Tolerance& tol,
                                     DType dtype) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << actual.shape().str() << " vs expected "
                                         << expected.shape().str();
  using M = Tolerance::Metric;
  CompareStats s;
  bool ok = false;
  std::string rule;
  switch (tol.metric) {
    case M::Mixed:
      s = compare(actual, expected, tol.atol, tol.rtol, dtype);
      ok = s.violations == 0 && s.nan_mismatch == 0;
      rule = fmt::format("|y-r| <= {:g} + {:g}|r|{}", tol.atol, tol.rtol, dtype == DType::BF16 ? " or 1 bf16 ulp" : "");
      break;
    case M::Nmse:
      s = compare(actual, expected);
      ok = s.nmse <= tol.bound && s.nan_mismatch == 0;
      rule = fmt::format("nmse <= {:g}", tol.bound);
      break;
    case M::RelL2:
      s = compare(actual, expected);
      ok = s.rel_l2 <= tol.bound && s.cosine >= tol.min_cosine && s.nan_mismatch == 0;
      rule = fmt::format("rel_l2 <= {:g}, cosine >= {:g}", tol.bound, tol.min_cosine);
      break;
    case M::Exact:
      s = compare(actual, expected);
      ok = s.max_abs == 0 && s.nan_mismatch == 0;
      rule = "exact";
      break;
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "outside " << rule << " (" << dtype_name(dtype) << "): " << s.str();
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, TolClass cls) {
  return all_close(actual, expected, tolerance_for(cls, actual.dtype()), actual.dtype());
}

::testing::AssertionResult attention_close(const Tensor& actual, const Tensor& naive_same_dtype,
                                           const Tensor& oracle, double factor) {
  const CompareStats k = compare(actual, oracle), n = compare(naive_same_dtype, oracle);
  const double limit = factor * n.nmse + 1e-12;
  if (k.nmse <= limit && k.nan_mismatch == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "kernel nmse " << k.nmse << " > " << factor << " x naive nmse " << n.nmse
                                       << "; kernel: " << k.str();
}

}  // namespace fluxrt::test
