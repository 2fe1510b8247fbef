// CPU normalisation kernels: AdaLN modulation, LayerNorm, RMSNorm. One row at a time: the row is
// read from memory once and re-read from L1 for the second statistic and the output pass.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/cpu_norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/simd-inl.h"
#include "backend/row_index.h"

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {

// Per-column f32 vectors (weights, 1 + scale, shift) laid out the way MapRow reads ColumnsOf inputs:
// for pair-layout rows every whole chunk of 2 Lanes columns holds its even columns, then its odd
// ones; the columns after the last whole chunk, and all columns of other dtypes, keep their order.
// `v` holds `count` vectors of D columns each, rearranged in place, once per call.
template <typename T>
void ArrangeColumns(std::vector<float>& v, int64_t D) {
  if constexpr (kPairs<T>) {
    const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
    std::vector<float> chunk(static_cast<size_t>(2 * N));
    for (int64_t row = 0; row + D <= static_cast<int64_t>(v.size()); row += D) {
      for (int64_t i = 0; i + 2 * N <= D; i += 2 * N) {
        float* p = v.data() + row + i;
        for (int64_t k = 0; k < N; ++k) {
          chunk[k] = p[2 * k];
          chunk[N + k] = p[2 * k + 1];
        }
        std::copy(chunk.begin(), chunk.end(), p);
      }
    }
  } else {
    (void)v;
    (void)D;
  }
}

// y = f(x, a, b) over a row of n elements, a and b f32 per-column vectors arranged by
// ArrangeColumns<T> (an unused b may alias a: the loads the lambda ignores are dropped). kStream
// follows MapRow's rule for per-column inputs: streamed only when y starts vector-aligned.
template <bool kStream = false, typename T, typename Fn>
HWY_INLINE void MapRowColumns(const T* x, T* y, int64_t n, const float* a, const float* b, Fn f) {
  MapRow<kStream>(y, n, f, RowOf<T>{x}, ColumnsOf{a}, ColumnsOf{b});
}

// Sum of x^2 over a row (RMSNorm's statistic; RowShiftedSums in simd-inl.h is the centred one),
// in four accumulator chains as RowShiftedSums.
template <typename T>
HWY_INLINE float RowSumSquares(const T* x, int64_t n) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    VF d0, d1, d2, d3;
    LoadTwo(df, x + i, &d0, &d1);
    LoadTwo(df, x + i + 2 * N, &d2, &d3);
    s0 = hn::MulAdd(d0, d0, s0);
    s1 = hn::MulAdd(d1, d1, s1);
    s2 = hn::MulAdd(d2, d2, s2);
    s3 = hn::MulAdd(d3, d3, s3);
  }
  for (; i + 2 * N <= n; i += 2 * N) {
    VF d0, d1;
    LoadTwo(df, x + i, &d0, &d1);
    s0 = hn::MulAdd(d0, d0, s0);
    s1 = hn::MulAdd(d1, d1, s1);
  }
  for (; i + N <= n; i += N) {
    const VF d = LoadF(df, x + i);
    s2 = hn::MulAdd(d, d, s2);
  }
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) {
    const float d = to_f32(x[i]);
    s += d * d;
  }
  return s;
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

void AdaLnImpl(const AdaLnArgs& args) {
  dispatch_float(args.x.dtype(), "adaln_modulate", [&]<typename T>() {
    const int64_t L = args.x.size(1), D = args.x.size(2);
    // 1 + scale and shift as f32 [B, D], once per call (never per token).
    std::vector<float> scale1 = f32_copy(args.scale), shift = f32_copy(args.shift);
    for (float& s : scale1) s += 1.0f;
    ArrangeColumns<T>(scale1, D);
    ArrangeColumns<T>(shift, D);
    const T* xp = args.x.data<T>();
    T* yp = args.y.data<T>();
    const DF df;
    with_stream(stream_output(args.y, {&args.x}), [&]<bool kS>() {
      for_each_row(args.x, args.y, args.x.numel() / std::max<int64_t>(D, 1), D,
                   [&](int64_t r, int64_t xo, int64_t yo) {
                     const T* x = xp + xo;
                     const int64_t b = r / L;
                     float mean, var;
                     RowMoments(x, D, &mean, &var);
                     const float inv_std = 1.0f / std::sqrt(var + args.eps);
                     // y = (x - mean) * a + shift with a = inv_std * (1 + scale) formed in registers: a
                     // per-row `a` array would add a store and a load per element and push a 4096-wide row
                     // (x, a, scale, shift) out of L1. Centring before the multiply keeps f32 accuracy when
                     // |mean| >> std.
                     const VF vi = hn::Set(df, inv_std), vm = hn::Set(df, mean);
                     MapRowColumns<kS>(
                         x, yp + yo, D, scale1.data() + b * D, shift.data() + b * D,
                         [&](VF v, VF s1, VF sh) { return hn::MulAdd(hn::Sub(v, vm), hn::Mul(s1, vi), sh); });
                   });
    });
  });
}

void LayerNormImpl(const LayerNormArgs& args) {
  dispatch_float(args.x.dtype(), "layer_norm", [&]<typename T>() {
    const RowIndex xi(args.x);
    const int64_t D = xi.cols();
    std::vector<float> w = args.weight.defined() ? f32_copy(args.weight) : std::vector<float>(D, 1.0f);
    std::vector<float> bias = f32_copy(args.bias);
    ArrangeColumns<T>(w, D);
    ArrangeColumns<T>(bias, D);
    const T* xp = args.x.data<T>();
    T* yp = args.y.data<T>();
    const DF df;
    with_stream(stream_output(args.y, {&args.x}), [&]<bool kS>() {
      for_each_row(args.x, args.y, xi.rows(), D, [&](int64_t, int64_t xo, int64_t yo) {
        const T* x = xp + xo;
        float mean, var;
        RowMoments(x, D, &mean, &var);
        const float inv_std = 1.0f / std::sqrt(var + args.eps);
        // (x - mean) * (w * inv_std) [+ b]: the same roundings as a per-row array of w * inv_std.
        const VF vi = hn::Set(df, inv_std), vm = hn::Set(df, mean);
        if (bias.empty())
          MapRowColumns<kS>(x, yp + yo, D, w.data(), w.data(),
                            [&](VF v, VF wv, VF) { return hn::Mul(hn::Sub(v, vm), hn::Mul(wv, vi)); });
        else
          MapRowColumns<kS>(x, yp + yo, D, w.data(), bias.data(), [&](VF v, VF wv, VF bv) {
            return hn::MulAdd(hn::Sub(v, vm), hn::Mul(wv, vi), bv);
          });
      });
    });
  });
}

// T5's intermediate rounding of x * inv_rms to T before the weight. For bf16 rows the NaN select
// of RoundTo is not needed (two of its seven operations): every NaN here is a bf16 input's
// (low half zero, and the multiply keeps the payload) or the hardware's default NaN (low half
// zero, from inf * 0), and adding at most 0x8000 to a zero low half never carries into the upper
// half, so the rounded value is the same NaN.
template <typename T>
HWY_INLINE VF RoundIntermediate(DF df, VF v) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (std::is_same_v<T, hwy::bfloat16_t>) {
    const hn::RebindToUnsigned<DF> du;
    const auto u = hn::BitCast(du, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
    const auto r = hn::Add(u, hn::Add(lsb, hn::Set(du, 0x7FFFu)));
    return hn::BitCast(df, hn::And(r, hn::Set(du, 0xFFFF0000u)));
  }
#endif
  return RoundTo<T>(df, v);
}

void RmsNormImpl(const RmsNormArgs& args) {
  dispatch_float(args.x.dtype(), "rms_norm", [&]<typename T>() {
    const RowIndex xi(args.x);
    const int64_t D = xi.cols();
    std::vector<float> w = args.weight.defined() ? f32_copy(args.weight) : std::vector<float>(D, 1.0f);
    ArrangeColumns<T>(w, D);
    const T* xp = args.x.data<T>();
    T* yp = args.y.data<T>();
    const float inv_d = 1.0f / static_cast<float>(D);
    const DF df;
    // Rows go in groups of four: each row's statistic ends in a chain of dependent steps (the
    // horizontal sum, square root, division) that a short row (a QK norm's 128-wide heads) spent
    // about as long waiting on as on its elements; the four chains of a group overlap.
    constexpr int64_t kGroup = 4;
    with_stream(stream_output(args.y, {&args.x}), [&]<bool kS>() {
      for_each_row_block(
          args.x, args.y, xi.rows(), D, [&](int64_t r0, int64_t r1, RowCursor& xc, RowCursor& yc) {
            for (int64_t r = r0; r < r1; r += kGroup) {
              const int64_t g = std::min(kGroup, r1 - r);
              int64_t xo[kGroup], yo[kGroup];
              float inv[kGroup];
              for (int64_t k = 0; k < g; ++k, xc.next(), yc.next()) {
                xo[k] = xc.offset();
                yo[k] = yc.offset();
              }
              for (int64_t k = 0; k < g; ++k) inv[k] = RowSumSquares(xp + xo[k], D);
              for (int64_t k = 0; k < g; ++k) inv[k] = 1.0f / std::sqrt(inv[k] * inv_d + args.eps);
              for (int64_t k = 0; k < g; ++k) {
                const T* x = xp + xo[k];
                const VF vi = hn::Set(df, inv[k]);
                if (args.round_before_weight)  // T5: the normalised row is rounded to T before the weight
                  MapRowColumns<kS>(x, yp + yo[k], D, w.data(), w.data(), [&](VF v, VF wv, VF) {
                    return hn::Mul(RoundIntermediate<T>(df, hn::Mul(v, vi)), wv);
                  });
                else
                  MapRowColumns<kS>(x, yp + yo[k], D, w.data(), w.data(),
                                    [&](VF v, VF wv, VF) { return hn::Mul(hn::Mul(v, vi), wv); });
              }
            }
          });
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
