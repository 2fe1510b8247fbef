// exp2 for the attention softmax (Highway, per target): included by each foreach_target
// translation unit that computes p = 2^(s - m), hence the toggle guard instead of #pragma once.
#if defined(FLUXRT_BACKEND_CPU_ATTENTION_EXP2_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLUXRT_BACKEND_CPU_ATTENTION_EXP2_INL_H_
#undef FLUXRT_BACKEND_CPU_ATTENTION_EXP2_INL_H_
#else
#define FLUXRT_BACKEND_CPU_ATTENTION_EXP2_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {

// 2^x for x <= 127; results below 2^-126.5 are flushed to exactly 0 (and -inf gives 0).
// Round-to-nearest splits x = n + f with |f| <= 1/2; the Taylor series of e^(f ln 2) is then
// accurate to about 5e-9 relative at degree 7 (below f32 rounding) and 4e-5 at degree 4 (well
// below bf16's half ulp of 2e-3, for probabilities that are rounded to bf16 anyway).
template <int kDegree = 7>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<hwy::HWY_NAMESPACE::ScalableTag<float>> AttentionExp2(
    hwy::HWY_NAMESPACE::ScalableTag<float> d,
    hwy::HWY_NAMESPACE::Vec<hwy::HWY_NAMESPACE::ScalableTag<float>> x) {
  namespace hn = hwy::HWY_NAMESPACE;
  static_assert(kDegree == 7 || kDegree == 4, "degree 7 (f32) or 4 (bf16)");
  const hn::RebindToSigned<decltype(d)> di;
  x = hn::Min(hn::Max(x, hn::Set(d, -127.0f)), hn::Set(d, 127.0f));
  // Adding 1.5 * 2^23 rounds x to the nearest integer, ties to even as Round does, and leaves n
  // in the low mantissa bits of t, so neither a round nor a float-to-int conversion (with its
  // overflow fix-up on x86) is needed: 2 instructions instead of 6 on AVX-512.
  const auto magic = hn::Set(d, 12582912.0f);
  const auto t = hn::Add(x, magic);
  const auto n = hn::Sub(t, magic);
  const auto f = hn::Sub(x, n);
  hn::Vec<decltype(d)> p;
  if constexpr (kDegree == 7) {
    p = hn::Set(d, 1.5252733804059841e-05f);
    p = hn::MulAdd(p, f, hn::Set(d, 1.5403530393381608e-04f));
    p = hn::MulAdd(p, f, hn::Set(d, 1.3333558146428443e-03f));
    p = hn::MulAdd(p, f, hn::Set(d, 9.6181291076284772e-03f));
    p = hn::MulAdd(p, f, hn::Set(d, 5.5504108664821580e-02f));
  } else {
    p = hn::Set(d, 9.6181291076284772e-03f);
    p = hn::MulAdd(p, f, hn::Set(d, 5.5504108664821580e-02f));
  }
  p = hn::MulAdd(p, f, hn::Set(d, 2.4022650695910071e-01f));
  p = hn::MulAdd(p, f, hn::Set(d, 6.9314718055994531e-01f));
  p = hn::MulAdd(p, f, hn::Set(d, 1.0f));
  // bits(t) = bits(1.5 * 2^23) + n, whose set bits all sit at 22 and above: shifted out.
  const auto bits = hn::ShiftLeft<23>(hn::Add(hn::BitCast(di, t), hn::Set(di, 127)));
  return hn::Mul(p, hn::BitCast(d, bits));
}

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLUXRT_BACKEND_CPU_ATTENTION_EXP2_INL_H_ toggle
