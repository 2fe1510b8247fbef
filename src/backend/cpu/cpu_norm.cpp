// CPU normalisation kernels: AdaLN modulation, LayerNorm, RMSNorm. One row at a time: the row is
// read from memory once and re-read from L1 for the second statistic and the output pass.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/cpu_norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/simd-inl.h"
#include "backend/row_index.h"

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {

// Sum of (x - c)^2 over a row.
template <typename T>
HWY_INLINE float RowSqDev(const T* x, int64_t n, float c) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF vc = hn::Set(df, c);
  VF s0 = hn::Zero(df), s1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const VF d0 = hn::Sub(LoadF(df, x + i), vc), d1 = hn::Sub(LoadF(df, x + i + N), vc);
    s0 = hn::MulAdd(d0, d0, s0);
    s1 = hn::MulAdd(d1, d1, s1);
  }
  for (; i + N <= n; i += N) {
    const VF d = hn::Sub(LoadF(df, x + i), vc);
    s0 = hn::MulAdd(d, d, s0);
  }
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
  for (; i < n; ++i) {
    const float d = to_f32(x[i]) - c;
    s += d * d;
  }
  return s;
}

// Shifted sums of a row: s1 = sum(x - c), s2 = sum((x - c)^2), f32 lanes, two accumulators.
template <typename T>
HWY_INLINE void RowShiftedSums(const T* x, int64_t n, float c, float* s1_out, float* s2_out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF vc = hn::Set(df, c);
  VF a0 = hn::Zero(df), a1 = hn::Zero(df), q0 = hn::Zero(df), q1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const VF d0 = hn::Sub(LoadF(df, x + i), vc), d1 = hn::Sub(LoadF(df, x + i + N), vc);
    a0 = hn::Add(a0, d0);
    a1 = hn::Add(a1, d1);
    q0 = hn::MulAdd(d0, d0, q0);
    q1 = hn::MulAdd(d1, d1, q1);
  }
  for (; i + N <= n; i += N) {
    const VF d = hn::Sub(LoadF(df, x + i), vc);
    a0 = hn::Add(a0, d);
    q0 = hn::MulAdd(d, d, q0);
  }
  float s1 = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
  float s2 = hn::GetLane(hn::SumOfLanes(df, hn::Add(q0, q1)));
  for (; i < n; ++i) {
    const float d = to_f32(x[i]) - c;
    s1 += d;
    s2 += d * d;
  }
  *s1_out = s1;
  *s2_out = s2;
}

// Mean and biased variance of a row, usually in one pass: shifted sums around c = x[0] give
// mean = c + s1/n and var = s2/n - (s1/n)^2, whose rounding error grows with (mean - c)^2 / var.
// When x[0] sits far from the mean (a massive activation in channel 0) the sums are redone
// around that first mean estimate, which is then within a rounding error of the true mean.
template <typename T>
HWY_INLINE void RowMoments(const T* x, int64_t n, float* mean, float* var) {
  const float inv_n = 1.0f / static_cast<float>(n);
  float c = to_f32(x[0]), s1, s2;
  RowShiftedSums(x, n, c, &s1, &s2);
  float dm = s1 * inv_n, v = s2 * inv_n - dm * dm;
  if (dm * dm > 16.0f * v) {
    c += dm;
    RowShiftedSums(x, n, c, &s1, &s2);
    dm = s1 * inv_n;
    v = s2 * inv_n - dm * dm;
  }
  *mean = c + dm;
  *var = std::max(v, 0.0f);
}

// y = (x - mean) * a[d] + b[d], a/b f32 per column (b may be null = 0). Centring before the
// multiply (instead of x * a + (b - mean * a)) keeps f32 accuracy when |mean| >> std.
template <typename T>
HWY_INLINE void RowAffine(const T* x, T* y, int64_t n, float mean, const float* a, const float* b) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF vm = hn::Set(df, mean);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF c = hn::Sub(LoadF(df, x + i), vm);
    StoreF(df, b ? hn::MulAdd(c, hn::LoadU(df, a + i), hn::LoadU(df, b + i)) : hn::Mul(c, hn::LoadU(df, a + i)), y + i);
  }
  if (i < n) {
    const size_t r = static_cast<size_t>(n - i);
    const VF c = hn::Sub(LoadFN(df, x + i, r), vm);
    const VF va = LoadFN(df, a + i, r);
    StoreFN(df, b ? hn::MulAdd(c, va, LoadFN(df, b + i, r)) : hn::Mul(c, va), y + i, r);
  }
}

void AdaLnImpl(const AdaLnArgs& args) {
  dispatch_float(args.x.dtype(), "adaln_modulate", [&]<typename T>() {
    const int64_t B = args.x.size(0), L = args.x.size(1), D = args.x.size(2);
    // 1 + scale and shift as f32 [B, D], once per call (never per token).
    std::vector<float> scale1 = f32_copy(args.scale), shift = f32_copy(args.shift);
    for (float& s : scale1) s += 1.0f;
    const RowIndex xi(args.x), yi(args.y);
    const T* xp = args.x.data<T>();
    T* yp = args.y.data<T>();
    parallel_for(B * L, B * L * D, [&](int64_t r) {
      const T* x = xp + xi.offset(r);
      const int64_t b = r / L;
      float mean, var;
      RowMoments(x, D, &mean, &var);
      const float inv_std = 1.0f / std::sqrt(var + args.eps);
      // y = (x - mean) * a + shift with a = inv_std * (1 + scale) formed in registers: a per-row
      // `a` array would add a store and a load per element and push a 4096-wide row (x, a,
      // scale, shift) out of L1. Same roundings as materialising a.
      const DF df;
      const int64_t N = static_cast<int64_t>(hn::Lanes(df));
      const float* s1 = scale1.data() + b * D;
      const float* sh = shift.data() + b * D;
      T* y = yp + yi.offset(r);
      const VF vi = hn::Set(df, inv_std), vm = hn::Set(df, mean);
      int64_t i = 0;
      for (; i + N <= D; i += N) {
        const VF a = hn::Mul(hn::LoadU(df, s1 + i), vi);
        StoreF(df, hn::MulAdd(hn::Sub(LoadF(df, x + i), vm), a, hn::LoadU(df, sh + i)), y + i);
      }
      if (i < D) {
        const size_t n = static_cast<size_t>(D - i);
        const VF a = hn::Mul(LoadFN(df, s1 + i, n), vi);
        StoreFN(df, hn::MulAdd(hn::Sub(LoadFN(df, x + i, n), vm), a, LoadFN(df, sh + i, n)), y + i, n);
      }
    });
  });
}

void LayerNormImpl(const LayerNormArgs& args) {
  dispatch_float(args.x.dtype(), "layer_norm", [&]<typename T>() {
    const RowIndex xi(args.x), yi(args.y);
    const int64_t D = xi.cols();
    const std::vector<float> w = args.weight.defined() ? f32_copy(args.weight) : std::vector<float>(D, 1.0f);
    const std::vector<float> bias = f32_copy(args.bias);
    const T* xp = args.x.data<T>();
    T* yp = args.y.data<T>();
    parallel_for(xi.rows(), xi.rows() * D, [&](int64_t r) {
      thread_local std::vector<float> a;
      a.resize(static_cast<size_t>(D));
      const T* x = xp + xi.offset(r);
      float mean, var;
      RowMoments(x, D, &mean, &var);
      const float inv_std = 1.0f / std::sqrt(var + args.eps);
      for (int64_t i = 0; i < D; ++i) a[i] = w[i] * inv_std;
      RowAffine(x, yp + yi.offset(r), D, mean, a.data(), bias.empty() ? nullptr : bias.data());
    });
  });
}

template <typename T, bool kRound>
HWY_INLINE void RmsRow(const T* x, T* y, int64_t n, float inv, const float* w) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF vi = hn::Set(df, inv);
  auto f = [&](VF v, VF vw) {
    VF h = hn::Mul(v, vi);
    if constexpr (kRound) h = RoundTo<T>(df, h);
    return hn::Mul(h, vw);
  };
  int64_t i = 0;
  for (; i + N <= n; i += N) StoreF(df, f(LoadF(df, x + i), hn::LoadU(df, w + i)), y + i);
  if (i < n) {
    const size_t r = static_cast<size_t>(n - i);
    StoreFN(df, f(LoadFN(df, x + i, r), LoadFN(df, w + i, r)), y + i, r);
  }
}

void RmsNormImpl(const RmsNormArgs& args) {
  dispatch_float(args.x.dtype(), "rms_norm", [&]<typename T>() {
    const RowIndex xi(args.x), yi(args.y);
    const int64_t D = xi.cols();
    const std::vector<float> w = args.weight.defined() ? f32_copy(args.weight) : std::vector<float>(D, 1.0f);
    const T* xp = args.x.data<T>();
    T* yp = args.y.data<T>();
    const float inv_d = 1.0f / static_cast<float>(D);
    parallel_for(xi.rows(), xi.rows() * D, [&](int64_t r) {
      const T* x = xp + xi.offset(r);
      const float inv = 1.0f / std::sqrt(RowSqDev(x, D, 0.0f) * inv_d + args.eps);
      if (args.round_before_weight) RmsRow<T, true>(x, yp + yi.offset(r), D, inv, w.data());
      else RmsRow<T, false>(x, yp + yi.offset(r), D, inv, w.data());
    });
  });
}

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fluxrt::backend::cpu {

HWY_EXPORT(AdaLnImpl);
HWY_EXPORT(LayerNormImpl);
HWY_EXPORT(RmsNormImpl);

void adaln_modulate(const AdaLnArgs& a) { HWY_DYNAMIC_DISPATCH(AdaLnImpl)(a); }
void layer_norm(const LayerNormArgs& a) { HWY_DYNAMIC_DISPATCH(LayerNormImpl)(a); }
void rms_norm(const RmsNormArgs& a) { HWY_DYNAMIC_DISPATCH(RmsNormImpl)(a); }

}  // namespace fluxrt::backend::cpu
#endif  // HWY_ONCE
