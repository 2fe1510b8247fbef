// CPU VAE kernels: GroupNorm (+ fused SiLU), nearest 2x upsampling, latent channel normalisation.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/cpu_vae.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {

// Shifted sums over n elements: s1 = sum(x - c), s2 = sum((x - c)^2). A group can hold millions
// of elements, so lanes accumulate in f32 over blocks of kBlock and the block sums add up in f64;
// the shift c (the group's first element) removes the cancellation of sum(x^2) - n mean^2.
template <typename T>
void ShiftedSums(const T* x, int64_t n, float c, double* s1, double* s2) {
  constexpr int64_t kBlock = 4096;
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF vc = hn::Set(df, c);
  double t1 = 0, t2 = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t b1 = std::min(n, b0 + kBlock);
    VF a1 = hn::Zero(df), a2 = hn::Zero(df);
    int64_t i = b0;
#if HWY_TARGET != HWY_SCALAR  // bf16 through the pair layout of simd-inl.h (cheaper widening)
    if constexpr (std::is_same_v<T, hwy::bfloat16_t>) {
      VF c1 = hn::Zero(df), c2 = hn::Zero(df);
      for (; i + 2 * N <= b1; i += 2 * N) {
        VF e, o;
        LoadBf16Pairs(df, x + i, &e, &o);
        e = hn::Sub(e, vc);
        o = hn::Sub(o, vc);
        a1 = hn::Add(a1, e);
        c1 = hn::Add(c1, o);
        a2 = hn::MulAdd(e, e, a2);
        c2 = hn::MulAdd(o, o, c2);
      }
      a1 = hn::Add(a1, c1);
      a2 = hn::Add(a2, c2);
    }
#endif
    for (; i + N <= b1; i += N) {
      const VF d = hn::Sub(LoadF(df, x + i), vc);
      a1 = hn::Add(a1, d);
      a2 = hn::MulAdd(d, d, a2);
    }
    double r1 = hn::GetLane(hn::SumOfLanes(df, a1)), r2 = hn::GetLane(hn::SumOfLanes(df, a2));
    for (; i < b1; ++i) {
      const double d = static_cast<double>(to_f32(x[i])) - c;
      r1 += d;
      r2 += d * d;
    }
    t1 += r1;
    t2 += r2;
  }
  *s1 = t1;
  *s2 = t2;
}

// y = (x - mean) a + b over a plane, then SiLU (the cheaper Accuracy::Bf16 math for bf16 output).
template <typename T, bool kSilu, bool kStream>
void PlaneAffine(const T* x, T* y, int64_t n, float mean, float a, float b) {
  const DF df;
  const VF vm = hn::Set(df, mean), va = hn::Set(df, a), vb = hn::Set(df, b);
  auto f = [&](VF v) {
    const VF t = hn::MulAdd(hn::Sub(v, vm), va, vb);
    if constexpr (kSilu)
      return Silu<kAccuracyFor<T>>(df, t);
    else
      return t;
  };
  MapRow1<kStream>(x, y, n, f);
}

void GroupNormImpl(const GroupNormArgs& args) {
  dispatch_float(args.x.dtype(), "group_norm", [&]<typename T>() {
    const int64_t N = args.x.size(0), C = args.x.size(1);
    const int64_t hw = N * C == 0 ? 0 : args.x.numel() / (N * C);
    const int64_t G = args.groups, cg = C / G, n_per = cg * hw;
    const std::vector<float> w = f32_copy(args.weight), bias = f32_copy(args.bias);
    const T* xp = args.x.data<T>();
    T* yp = args.y.data<T>();
    with_stream(stream_output(args.y, {&args.x}), [&]<bool kS>() {
      parallel_for(N * G, N * C * hw, [&](int64_t u) {
        const int64_t base = u * n_per;  // (n * C + g * cg) * hw
        const int64_t g = u % G;
        if (n_per == 0) return;
        float c = to_f32(xp[base]);
        double s1, s2;
        ShiftedSums(xp + base, n_per, c, &s1, &s2);
        double dm = s1 / static_cast<double>(n_per);
        double var = s2 / static_cast<double>(n_per) - dm * dm;
        if (dm * dm > 16.0 * var) {  // x[0] far from the mean: redo the sums around the estimate
          c = static_cast<float>(c + dm);
          ShiftedSums(xp + base, n_per, c, &s1, &s2);
          dm = s1 / static_cast<double>(n_per);
          var = s2 / static_cast<double>(n_per) - dm * dm;
        }
        var = std::max(0.0, var);
        const float mean = static_cast<float>(c + dm);
        const float inv = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(args.eps)));
        for (int64_t k = 0; k < cg; ++k) {
          const int64_t ch = g * cg + k;
          const float a = (w.empty() ? 1.0f : w[ch]) * inv, b = bias.empty() ? 0.0f : bias[ch];
          const int64_t off = base + k * hw;
          if (args.silu)
            PlaneAffine<T, true, kS>(xp + off, yp + off, hw, mean, a, b);
          else
            PlaneAffine<T, false, kS>(xp + off, yp + off, hw, mean, a, b);
        }
      });
    });
  });
}

void ChannelNormImpl(const ChannelNormArgs& args) {
  dispatch_float(args.x.dtype(), "channel_norm", [&]<typename T>() {
    const int64_t N = args.x.size(0), C = args.x.size(1);
    const int64_t hw = N * C == 0 ? 0 : args.x.numel() / (N * C);
    const std::vector<float> mean = f32_copy(args.mean), var = f32_copy(args.var);
    const T* xp = args.x.data<T>();
    T* yp = args.y.data<T>();
    with_stream(stream_output(args.y, {&args.x}), [&]<bool kS>() {
      parallel_for(N * C, N * C * hw, [&](int64_t u) {
        const int64_t c = u % C;
        const double sd = std::sqrt(static_cast<double>(var[c]) + static_cast<double>(args.eps));
        const int64_t off = u * hw;
        // forward: (x - mean) * (1/sd); inverse: (x - 0) * sd + mean.
        if (args.inverse)
          PlaneAffine<T, false, kS>(xp + off, yp + off, hw, 0.0f, static_cast<float>(sd), mean[c]);
        else
          PlaneAffine<T, false, kS>(xp + off, yp + off, hw, mean[c], static_cast<float>(1.0 / sd), 0.0f);
      });
    });
  });
}

// Nearest 2x upsampling of planes of 2- or 4-byte elements U (the dtype does not change, so
// this moves bits): each input row becomes two identical output rows with every element doubled.
// The pair (v, v) is built in a lane of twice U's width as v | v << bits (a zero-extending load,
// the same on every target), and each vector is stored to both output rows; the output is 4x the
// input, so when streamed (kStream, rows vector-aligned) the op moves 5 units instead of 9.
template <bool kStream, typename U>
void UpsampleRows(const U* x, U* y, int64_t planes, int64_t H, int64_t W) {
  parallel_for(planes * H, planes * H * W * 4, [&](int64_t r) {
    const U* in = x + r * W;
    U* out0 = y + r * 4 * W;  // rows 2i and 2i+1 of the plane are adjacent
    U* out1 = out0 + 2 * W;
    int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR
    using Wide = std::conditional_t<sizeof(U) == 2, uint32_t, uint64_t>;
    const hn::Repartition<Wide, DF> dw;
    const hn::Rebind<U, decltype(dw)> dn;       // half-width loads of input elements
    const hn::Repartition<U, decltype(dw)> du;  // stores through U lanes (rows are U-aligned)
    const int64_t N = static_cast<int64_t>(hn::Lanes(dw));
    auto doubled = [&](int64_t at) {
      const auto v = hn::PromoteTo(dw, hn::LoadU(dn, in + at));
      return hn::BitCast(du, hn::Or(v, hn::ShiftLeft<8 * sizeof(U)>(v)));
    };
    if (kStream && ElementsBeforeAlignment(out0, 2 * W) == 0 && ElementsBeforeAlignment(out1, 2 * W) == 0) {
      for (; j + N <= W; j += N) {
        const auto d = doubled(j);
        hn::Stream(d, du, out0 + 2 * j);
        hn::Stream(d, du, out1 + 2 * j);
      }
    }
    for (; j + N <= W; j += N) {
      const auto d = doubled(j);
      hn::StoreU(d, du, out0 + 2 * j);
      hn::StoreU(d, du, out1 + 2 * j);
    }
#endif
    for (; j < W; ++j) out0[2 * j] = out0[2 * j + 1] = out1[2 * j] = out1[2 * j + 1] = in[j];
  });
}

void Upsample2xImpl(const Upsample2xArgs& a) {
  const int64_t H = a.x.size(-2), W = a.x.size(-1);
  const int64_t planes = H * W == 0 ? 0 : a.x.numel() / (H * W);
  with_stream(stream_output(a.y, {&a.x}), [&]<bool kS>() {
    if (a.x.element_size() == 2)
      UpsampleRows<kS>(a.x.data<uint16_t>(), a.y.data<uint16_t>(), planes, H, W);
    else
      UpsampleRows<kS>(a.x.data<uint32_t>(), a.y.data<uint32_t>(), planes, H, W);
  });
}

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fluxrt::backend::cpu {

HWY_EXPORT(GroupNormImpl);
HWY_EXPORT(ChannelNormImpl);
HWY_EXPORT(Upsample2xImpl);

void group_norm(const GroupNormArgs& a) { HWY_DYNAMIC_DISPATCH(GroupNormImpl)(a); }
void channel_norm(const ChannelNormArgs& a) { HWY_DYNAMIC_DISPATCH(ChannelNormImpl)(a); }

namespace {
// 1- and 8-byte elements (no FLUX dtype; kept for completeness): each input row becomes two
// identical output rows with every element doubled.
template <typename U>
void upsample_rows(const U* x, U* y, int64_t planes, int64_t H, int64_t W) {
  parallel_for(planes * H, planes * H * W * 4, [&](int64_t r) {
    const U* in = x + r * W;
    U* out = y + r * 4 * W;  // rows 2i and 2i+1 of the plane are adjacent
    for (int64_t j = 0; j < W; ++j) out[2 * j] = out[2 * j + 1] = in[j];
    std::memcpy(out + 2 * W, out, static_cast<size_t>(2 * W) * sizeof(U));
  });
}
}  // namespace

void upsample_nearest_2x(const Upsample2xArgs& a) {
  const int64_t H = a.x.size(-2), W = a.x.size(-1);
  const int64_t planes = H * W == 0 ? 0 : a.x.numel() / (H * W);
  switch (a.x.element_size()) {
    case 2:
    case 4:
      HWY_DYNAMIC_DISPATCH(Upsample2xImpl)(a);
      return;
    case 8:
      upsample_rows(a.x.data<uint64_t>(), a.y.data<uint64_t>(), planes, H, W);
      return;
    case 1:
      upsample_rows(a.x.data<uint8_t>(), a.y.data<uint8_t>(), planes, H, W);
      return;
    default:
      fail(ErrorCode::Unsupported, "[upsample_nearest_2x] element size {}", a.x.element_size());
  }
}

}  // namespace fluxrt::backend::cpu
#endif  // HWY_ONCE
