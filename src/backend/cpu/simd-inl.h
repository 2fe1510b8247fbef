// Per-target SIMD helpers (Highway): load any storage type as f32 lanes, store f32 lanes with
// round-to-nearest-even (PyTorch's rounding), partial loads/stores for row tails, and the math
// functions the activations need. Included once per target by each foreach_target translation
// unit, hence the toggle guard instead of #pragma once.
#if defined(FLUXRT_BACKEND_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLUXRT_BACKEND_CPU_SIMD_INL_H_
#undef FLUXRT_BACKEND_CPU_SIMD_INL_H_
#else
#define FLUXRT_BACKEND_CPU_SIMD_INL_H_
#endif

#include <cstring>

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "core/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

template <typename T>
HWY_INLINE VF LoadF(DF df, const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else {
    const hn::Rebind<T, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, p));
  }
}

// f32 -> bf16 bits with round-to-nearest-even; every NaN becomes kBF16NaNFromF32, the pattern
// torch's tensor .to() writes and fluxrt::f32_to_bf16 returns, so SIMD bodies and scalar tails
// agree. (Highway 1.0's DemoteTo to bf16 truncates, so it is not used.)
HWY_INLINE hn::Vec<hn::Rebind<int32_t, DF>> Bf16BitsRne(DF df, VF v) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  auto r = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), lsb)));
  r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Set(du, uint32_t{kBF16NaNFromF32}), r);
  (void)df;
  return hn::BitCast(di, r);
}

template <typename T>
HWY_INLINE void StoreF(DF df, VF v, T* p) {
  if constexpr (std::is_same_v<T, float>) {
    hn::StoreU(v, df, p);
  } else if constexpr (std::is_same_v<T, hwy::bfloat16_t>) {
    const hn::Rebind<uint16_t, DF> du16;
    hn::StoreU(hn::DemoteTo(du16, Bf16BitsRne(df, v)), du16, reinterpret_cast<uint16_t*>(p));
  } else {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    const hn::Rebind<hwy::float16_t, DF> dh;  // F16C: round-to-nearest-even
    hn::StoreU(hn::DemoteTo(dh, v), dh, p);
#else
    // Other targets' emulated f16 demotion may truncate: use the exact scalar conversion.
    HWY_ALIGN float tmp[hn::MaxLanes(df)];
    hn::Store(v, df, tmp);
    for (size_t i = 0; i < hn::Lanes(df); ++i) {
      const uint16_t bits = f32_to_f16(tmp[i]);
      std::memcpy(p + i, &bits, 2);
    }
#endif
  }
}

// Rounds f32 lanes to T's precision and back (for ops that round an intermediate, e.g. T5 norm).
template <typename T>
HWY_INLINE VF RoundTo(DF df, VF v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    HWY_ALIGN T tmp[hn::MaxLanes(df)];
    StoreF(df, v, tmp);
    return LoadF(df, tmp);
  }
}

// Tails: the first n (< Lanes) elements, the rest of the vector zero.
template <typename T>
HWY_INLINE VF LoadFN(DF df, const T* p, size_t n) {
  HWY_ALIGN T tmp[hn::MaxLanes(df)] = {};
  std::memcpy(tmp, p, n * sizeof(T));
  return LoadF(df, tmp);
}
template <typename T>
HWY_INLINE void StoreFN(DF df, VF v, T* p, size_t n) {
  HWY_ALIGN T tmp[hn::MaxLanes(df)];
  StoreF(df, v, tmp);
  std::memcpy(p, tmp, n * sizeof(T));
}

// exp(x) for the activations, about 3x cheaper than hn::Exp on AVX2 (which dominated SiLU/GELU):
// x = n ln2 + r with n = round(x / ln2) and ln2 split in two (Cody-Waite) so r is exact enough,
// exp(r) by a degree-7 Taylor-like minimax polynomial on |r| <= ln2/2 (~1 ulp), then 2^n through
// the exponent bits. Inputs are clamped to [-87, 88] so 2^n stays a normal float: exp(-87)
// ~ 1.6e-38 stands in for smaller values, which every caller here divides into or adds to 1.
HWY_INLINE VF ExpClamped(DF df, VF x) {
  const hn::RebindToSigned<DF> di;
  x = hn::Min(hn::Max(x, hn::Set(df, -87.0f)), hn::Set(df, 88.0f));
  const VF n = hn::Round(hn::Mul(x, hn::Set(df, 1.44269504088896341f)));
  VF r = hn::NegMulAdd(n, hn::Set(df, 0.693359375f), x);  // ln2 high part (exact in 9 bits)
  r = hn::NegMulAdd(n, hn::Set(df, -2.12194440e-4f), r);  // ln2 low part
  VF p = hn::Set(df, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(df, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(df, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(df, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(df, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(df, 5.0000001201e-1f));
  p = hn::MulAdd(p, hn::Mul(r, r), hn::Add(r, hn::Set(df, 1.0f)));
  const auto bits = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::Mul(p, hn::BitCast(df, bits));
}

// x / d for d >= 1 without the divider (vdivps is the slowest instruction of the activations on
// AVX2: ~1 per 5 cycles for 8 lanes): the 12-bit hardware reciprocal and one Newton step
// r (2 - d r), relative error ~2^-22 (well inside the Transcendental tolerance, numerics.md).
// Where the divider is as fast as the rest (scalar / emulated targets) plain division is kept.
HWY_INLINE VF DivByAtLeastOne(DF df, VF x, VF d) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_SSE4
  const VF r0 = hn::ApproximateReciprocal(d);
  // For d > 2^126 the approximation may flush to zero; flooring r at 2^-126 keeps x = -inf at
  // -inf (as x / d gives) instead of -inf * 0 = NaN, and finite quotients stay below 1e-36.
  const VF r = hn::Max(hn::Mul(r0, hn::NegMulAdd(d, r0, hn::Set(df, 2.0f))), hn::Set(df, 0x1p-126f));
  return hn::Mul(x, r);
#else
  (void)df;
  return hn::Div(x, d);
#endif
}

// x * sigmoid(k x) = x / (1 + exp(-k x)); for very negative x the clamped exp makes the result a
// tiny multiple of x (|y| < 1e-36 |x|) instead of the exact underflow to 0.
HWY_INLINE VF SiluK(DF df, VF x, float k) {
  const VF e = ExpClamped(df, hn::Mul(x, hn::Set(df, -k)));
  return DivByAtLeastOne(df, x, hn::Add(hn::Set(df, 1.0f), e));
}
HWY_INLINE VF Silu(DF df, VF x) { return SiluK(df, x, 1.0f); }

// GELU-tanh written as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the same function as
// 0.5 x (1 + tanh(u)) without the cancellation of 1 + tanh(u) for negative x.
HWY_INLINE VF GeluTanh(DF df, VF x) {
  const VF x2 = hn::Mul(x, x);
  const VF inner = hn::MulAdd(hn::Mul(x2, hn::Set(df, 0.044715f)), x, x);  // x + 0.044715 x^3
  const VF e = ExpClamped(df, hn::Mul(inner, hn::Set(df, -2.0f * 0.7978845608028654f)));
  return DivByAtLeastOne(df, x, hn::Add(hn::Set(df, 1.0f), e));
}

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLUXRT_BACKEND_CPU_SIMD_INL_H_
