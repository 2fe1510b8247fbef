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

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/cpu_common.h"
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
  } else if constexpr (std::is_same_v<T, hwy::float16_t>) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    const hn::Rebind<T, DF> dh;  // F16C: exact, infinities and NaN included
    return hn::PromoteTo(df, hn::LoadU(dh, p));
#else
    // Other targets' emulated f16 promotion may read exponent 31 as a finite number (Highway
    // 1.0's scalar one turns inf and NaN into 65536-ish values): use the exact scalar conversion.
    HWY_ALIGN float tmp[hn::MaxLanes(df)];
    for (size_t i = 0; i < hn::Lanes(df); ++i) {
      uint16_t bits;
      std::memcpy(&bits, p + i, 2);
      tmp[i] = f16_to_f32(bits);
    }
    return hn::Load(df, tmp);
#endif
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

// v rounded to nearest even bf16, in the upper half of each u32 lane; NaN lanes become all ones,
// i.e. kBF16NaNFromF32 (0xFFFF) in the upper half, as Bf16BitsRne gives.
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> Bf16RneHigh(DF df, VF v) {
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto r = hn::Add(u, hn::Add(lsb, hn::Set(du, 0x7FFFu)));
  return hn::Or(r, hn::BitCast(du, hn::VecFromMask(df, hn::IsNaN(v))));
}
static_assert(kBF16NaNFromF32 == 0xFFFF, "Bf16RneHigh writes NaN as all ones");

// Rounds f32 lanes to T's precision and back (for ops that round an intermediate, e.g. T5 norm).
template <typename T>
HWY_INLINE VF RoundTo(DF df, VF v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
#if HWY_TARGET != HWY_SCALAR
  } else if constexpr (std::is_same_v<T, hwy::bfloat16_t>) {  // in registers: no store/reload
    const hn::RebindToUnsigned<DF> du;
    return hn::BitCast(df, hn::And(Bf16RneHigh(df, v), hn::Set(du, 0xFFFF0000u)));
#endif
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

// Whether x / d goes through the hardware reciprocal (DivByAtLeastOne) on this target.
#undef FLUXRT_CPU_RCP_DIVIDE
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_SSE4
#define FLUXRT_CPU_RCP_DIVIDE 1
#else
#define FLUXRT_CPU_RCP_DIVIDE 0
#endif

// Upper clamp of ExpParts. With the reciprocal: 88 keeps exp finite (1.65e38), and every
// d = 1 + exp(x) >= 2^126 (x >= 87.34) gets a reciprocal of exactly 0 (DivByAtLeastOne zeroes it
// explicitly), so x / d is +-0 for any finite x, as the exact quotient underflows. With true division: 88.72
// lets 2^n reach 2^128 = inf, so x / d = +-0 and -inf / inf = NaN as in ref.
#if FLUXRT_CPU_RCP_DIVIDE
inline constexpr float kExpUpperClamp = 88.0f;
#else
inline constexpr float kExpUpperClamp = 88.72f;
#endif

// exp(x) for the activations and softmax, about 2x cheaper than the previous Cody-Waite +
// degree-7 version and ~5x cheaper than hn::Exp on AVX2 (the activations are compute-bound):
// n = round(x / ln2) comes from one FMA with the 1.5 * 2^23 "magic" constant, which leaves n + 127
// in the low mantissa bits, so 2^n is one shift of those bits (no float->int conversion, whose
// overflow fix-ups Highway adds on x86); r = x - n ln2 with ln2 rounded to f32 (one FMA: the
// error n * 1.9e-9 stays below 2.5e-7 relative for |n| <= 128); exp(r) by a degree-5 polynomial
// fitted for relative error on |r| <= 1.02 ln2/2 (max 1.0e-7). Measured in f32 against f64: exp
// within 4e-7 relative on [-87, 87]; SiLU and GELU-tanh within 5% of the Transcendental bound.
// Inputs are clamped to [-87, kExpUpperClamp] so 2^n stays normal at the bottom: exp(-87) ~
// 1.6e-38 stands in for smaller values, which every caller here divides into, adds to 1 or zeroes.
// Returns the polynomial p and the scale 2^n separately: exp(x) = p * 2^n, and 1 + exp(x) is one
// FMA. The clamp's operand order (constant first) keeps a NaN input NaN on x86.
// kNegated computes exp(-x) with the negation folded into the constants (SiLU saves an
// operation): n = round(-x / ln2), r' = x + n ln2 = -r, and p(-r') is p with the odd
// coefficients negated.
//
// Accuracy::Bf16 is for results that are rounded to bf16 (half an ulp: 2^-9 = 2.0e-3 relative):
// a degree-3 polynomial (max relative error 1.1e-4 on the same range; two FMAs fewer) and, in
// DivByAtLeastOne, the hardware reciprocal without its Newton step (relative error below 2^-11 on
// x86; two operations fewer). Together they stay below a quarter of bf16's rounding step, far
// inside the bf16 element-wise tolerance (1e-2, numerics.md). f32 and f16 results keep the exact
// path: f16's half ulp (2^-11) is too close to the reciprocal's error.
enum class Accuracy { F32, Bf16 };
template <typename T>
inline constexpr Accuracy kAccuracyFor = std::is_same_v<T, hwy::bfloat16_t> ? Accuracy::Bf16 : Accuracy::F32;

template <bool kNegated = false, Accuracy kAcc = Accuracy::F32>
HWY_INLINE void ExpParts(DF df, VF x, VF* p_out, VF* scale_out) {
  const hn::RebindToUnsigned<DF> du;
  constexpr float kLo = kNegated ? -kExpUpperClamp : -87.0f, kHi = kNegated ? 87.0f : kExpUpperClamp;
  constexpr float kOdd = kNegated ? -1.0f : 1.0f;  // sign of the odd coefficients
  x = hn::Min(hn::Set(df, kHi), hn::Max(hn::Set(df, kLo), x));
  const VF magic = hn::Set(df, 12582912.0f + 127.0f);  // 1.5 * 2^23 + exponent bias
  const VF t = hn::MulAdd(x, hn::Set(df, kOdd * 1.44269504088896341f), magic);
  const VF n = hn::Sub(t, magic);
  const VF ln2 = hn::Set(df, 0.693147180559945f);
  const VF r = kNegated ? hn::MulAdd(n, ln2, x) : hn::NegMulAdd(n, ln2, x);
  VF p;
  if constexpr (kAcc == Accuracy::Bf16) {  // relative minimax fit on the same range
    p = hn::Set(df, kOdd * 1.6512088632e-1f);
    p = hn::MulAdd(p, r, hn::Set(df, 5.0429662162e-1f));
    p = hn::MulAdd(p, r, hn::Set(df, kOdd * 1.0002118429e+0f));
  } else {
    p = hn::Set(df, kOdd * 8.2885942453e-3f);
    p = hn::MulAdd(p, r, hn::Set(df, 4.1907231852e-2f));
    p = hn::MulAdd(p, r, hn::Set(df, kOdd * 1.6667715778e-1f));
    p = hn::MulAdd(p, r, hn::Set(df, 4.9999079964e-1f));
    p = hn::MulAdd(p, r, hn::Set(df, kOdd * 9.9999967039e-1f));
  }
  *p_out = hn::MulAdd(p, r, hn::Set(df, 1.0f));
  *scale_out = hn::BitCast(df, hn::ShiftLeft<23>(hn::BitCast(du, t)));
}

// 2^v for Accuracy::Bf16 results, v in log2 units (GELU-tanh folds log2(e) into its constants).
// The reduction is n = round(v), f = v - n in [-0.5, 0.5] (exact), 2^f by ExpParts' degree-3
// polynomial rescaled from r = f ln2 (coefficients c_k ln2^k: the same 1.1e-4 relative error),
// and 2^n from n's bits as in ExpParts. Against ExpParts' reduction (FMA, subtract, FMA) this is
// one multiply fewer and a shorter dependency chain, which is what bounds GELU-tanh (measured on
// Zen3: GELU-tanh bf16 0.537 -> 0.470 ns/element single thread, cache-resident; SiLU, whose
// exponent needs a multiply first, gained nothing and keeps ExpParts). v is clamped to ExpParts'
// range in log2 units (NaN kept). Returns p and the scale separately, as ExpParts.
HWY_INLINE void Exp2PartsBf16(DF df, VF v, VF* p_out, VF* scale_out) {
  const hn::RebindToUnsigned<DF> du;
  constexpr float kLog2e = 1.44269504088896341f;
  v = hn::Min(hn::Set(df, kExpUpperClamp * kLog2e), hn::Max(hn::Set(df, -87.0f * kLog2e), v));
  const VF n = hn::Round(v);
  const VF f = hn::Sub(v, n);
  VF p = hn::Set(df, 5.4989326745e-2f);
  p = hn::MulAdd(p, f, hn::Set(df, 2.4229082465e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 6.9329404831e-1f));
  *p_out = hn::MulAdd(p, f, hn::Set(df, 1.0f));
  const VF biased = hn::Add(n, hn::Set(df, 12582912.0f + 127.0f));  // n + 127 in the low mantissa bits
  *scale_out = hn::BitCast(df, hn::ShiftLeft<23>(hn::BitCast(du, biased)));
}

HWY_INLINE VF ExpClamped(DF df, VF x) {
  VF p, s;
  ExpParts(df, x, &p, &s);
  return hn::Mul(p, s);
}
// 1 + exp(x), or 1 + exp(-x) with kNegated.
template <bool kNegated = false, Accuracy kAcc = Accuracy::F32>
HWY_INLINE VF OnePlusExpClamped(DF df, VF x) {
  VF p, s;
  ExpParts<kNegated, kAcc>(df, x, &p, &s);
  return hn::MulAdd(p, s, hn::Set(df, 1.0f));
}

// x / d for d >= 1 without the divider (vdivps is the slowest instruction of the activations on
// AVX2: ~1 per 5 cycles for 8 lanes): the 12-bit hardware reciprocal and one Newton step
// r (2 - d r), relative error ~2^-22 (well inside the Transcendental tolerance, numerics.md);
// Accuracy::Bf16 skips the Newton step. d must be finite (inf * 0 would be NaN): ExpParts' clamp
// sees to it. Where the divider is as fast as the rest (scalar / emulated targets) plain division
// is kept.
// The reciprocal of d >= 2^126 is set to 0 here rather than left to the instruction: AVX2's
// vrcpps flushes such (subnormal) results to 0, but AVX-512's vrcp14ps returns the subnormal
// 1/d, and since ExpParts clamps d at ~2^127 the quotient then grows with |x| (silu(-3e38) gave
// -1.8 instead of -0). Selecting 0 makes every x86 target give the same +-0.
template <Accuracy kAcc = Accuracy::F32>
HWY_INLINE VF DivByAtLeastOne(DF df, VF x, VF d) {
#if FLUXRT_CPU_RCP_DIVIDE
  const VF r0 = hn::IfThenZeroElse(d >= hn::Set(df, 0x1p126f), hn::ApproximateReciprocal(d));
  if constexpr (kAcc == Accuracy::Bf16) return hn::Mul(x, r0);
  return hn::Mul(hn::Mul(x, r0), hn::NegMulAdd(d, r0, hn::Set(df, 2.0f)));
#else
  (void)df;
  return hn::Div(x, d);
#endif
}

// x * sigmoid(k x) = x / (1 + exp(-k x)); for very negative x the result is 0 or a value below
// 1e-36 where the exact one underflows.
template <Accuracy kAcc = Accuracy::F32>
HWY_INLINE VF SiluK(DF df, VF x, float k) {
  return DivByAtLeastOne<kAcc>(df, x, OnePlusExpClamped<false, kAcc>(df, hn::Mul(x, hn::Set(df, -k))));
}
template <Accuracy kAcc = Accuracy::F32>
HWY_INLINE VF Silu(DF df, VF x) {
  return DivByAtLeastOne<kAcc>(df, x, OnePlusExpClamped<true, kAcc>(df, x));
}

// GELU-tanh written as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the same function as
// 0.5 x (1 + tanh(u)) without the cancellation of 1 + tanh(u) for negative x. The exponent -2u is
// formed as x (a + b x^2) with the constants folded (three operations instead of four); for bf16
// results log2(e) is folded in too, and Exp2PartsBf16 takes the exponent as it is.
template <Accuracy kAcc = Accuracy::F32>
HWY_INLINE VF GeluTanh(DF df, VF x) {
  constexpr float kA = -2.0f * 0.7978845608028654f, kB = -2.0f * 0.7978845608028654f * 0.044715f;
  if constexpr (kAcc == Accuracy::Bf16) {
    constexpr float kLog2e = 1.44269504088896341f;
    const VF arg2 = hn::Mul(hn::MulAdd(hn::Mul(x, x), hn::Set(df, kB * kLog2e), hn::Set(df, kA * kLog2e)), x);
    VF p, s;
    Exp2PartsBf16(df, arg2, &p, &s);
    return DivByAtLeastOne<kAcc>(df, x, hn::MulAdd(p, s, hn::Set(df, 1.0f)));
  }
  const VF arg = hn::Mul(hn::MulAdd(hn::Mul(x, x), hn::Set(df, kB), hn::Set(df, kA)), x);
  return DivByAtLeastOne<kAcc>(df, x, OnePlusExpClamped<false, kAcc>(df, arg));
}

#if HWY_TARGET != HWY_SCALAR
// bf16 rows as pairs: one u32 lane holds elements 2i (low half) and 2i+1 (high half), so a full
// vector of u32 is 2 Lanes(df) bf16 values that widen to f32 with one shift (even) and one AND
// (odd), and narrow back with one blend; PromoteTo / DemoteTo need lane-crossing shuffles on x86.
// Element order inside the pair layout is the same on every target (little-endian lanes), so
// callers may apply any per-element function, and per-column data must use the same split.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the bf16 pair layout assumes little-endian lanes"
#endif
using DU32 = hn::RebindToUnsigned<DF>;
// Loads and stores go through u16 lanes: a bf16 row is only 2-byte aligned.
// The even and odd elements of a raw vector of bf16 pairs, widened to f32.
HWY_INLINE VF EvenOf(DF df, hn::Vec<DU32> raw) { return hn::BitCast(df, hn::ShiftLeft<16>(raw)); }
HWY_INLINE VF OddOf(DF df, hn::Vec<DU32> raw) { return hn::BitCast(df, hn::And(raw, hn::Set(DU32(), 0xFFFF0000u))); }
HWY_INLINE void LoadBf16Pairs(DF df, const hwy::bfloat16_t* p, VF* even, VF* odd) {
  const hn::Repartition<uint16_t, DF> du16;
  const auto raw = hn::BitCast(DU32(), hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p)));
  *even = EvenOf(df, raw);
  *odd = OddOf(df, raw);
}
using DU16 = hn::Repartition<uint16_t, DF>;
// Even and odd lanes rounded to bf16 and interleaved back into element order.
HWY_INLINE hn::Vec<DU16> PackBf16Pairs(DF df, VF even, VF odd) {
  const DU16 du16;
  const auto lo = hn::ShiftRight<16>(Bf16RneHigh(df, even));
  return hn::OddEven(hn::BitCast(du16, Bf16RneHigh(df, odd)), hn::BitCast(du16, lo));
}
#endif

// Whether T's rows go through the pair layout of simd-inl.h on this target.
template <typename T>
inline constexpr bool kPairs = std::is_same_v<T, hwy::bfloat16_t>&& HWY_TARGET != HWY_SCALAR;

// 2 Lanes consecutive elements as two f32 vectors, in the pair layout (even, odd) for bf16 and in
// order otherwise: for sums over a row, where the order does not matter.
template <typename T>
HWY_INLINE void LoadTwo(DF df, const T* x, VF* v0, VF* v1) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (kPairs<T>) {
    LoadBf16Pairs(df, x, v0, v1);
    return;
  }
#endif
  *v0 = LoadF(df, x);
  *v1 = LoadF(df, x + hn::Lanes(df));
}

// Shifted sums of a row: s1 = sum(x - c), s2 = sum((x - c)^2), f32 lanes. Four independent
// accumulator chains: with two, a 4096-wide row's sum waited on the FMA latency (4 cycles per 16
// elements) rather than on the loads. Shared by the row norms and GroupNorm's slices.
template <typename T>
HWY_INLINE void RowShiftedSums(const T* x, int64_t n, float c, float* s1_out, float* s2_out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF vc = hn::Set(df, c);
  VF a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  VF q0 = hn::Zero(df), q1 = hn::Zero(df), q2 = hn::Zero(df), q3 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    VF d0, d1, d2, d3;
    LoadTwo(df, x + i, &d0, &d1);
    LoadTwo(df, x + i + 2 * N, &d2, &d3);
    d0 = hn::Sub(d0, vc);
    d1 = hn::Sub(d1, vc);
    d2 = hn::Sub(d2, vc);
    d3 = hn::Sub(d3, vc);
    a0 = hn::Add(a0, d0);
    a1 = hn::Add(a1, d1);
    a2 = hn::Add(a2, d2);
    a3 = hn::Add(a3, d3);
    q0 = hn::MulAdd(d0, d0, q0);
    q1 = hn::MulAdd(d1, d1, q1);
    q2 = hn::MulAdd(d2, d2, q2);
    q3 = hn::MulAdd(d3, d3, q3);
  }
  for (; i + 2 * N <= n; i += 2 * N) {
    VF d0, d1;
    LoadTwo(df, x + i, &d0, &d1);
    d0 = hn::Sub(d0, vc);
    d1 = hn::Sub(d1, vc);
    a0 = hn::Add(a0, d0);
    a1 = hn::Add(a1, d1);
    q0 = hn::MulAdd(d0, d0, q0);
    q1 = hn::MulAdd(d1, d1, q1);
  }
  for (; i + N <= n; i += N) {
    const VF d = hn::Sub(LoadF(df, x + i), vc);
    a2 = hn::Add(a2, d);
    q2 = hn::MulAdd(d, d, q2);
  }
  float s1 = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  float s2 = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(q0, q1), hn::Add(q2, q3))));
  for (; i < n; ++i) {
    const float d = to_f32(x[i]) - c;
    s1 += d;
    s2 += d * d;
  }
  *s1_out = s1;
  *s2_out = s2;
}

// Non-temporal ("streaming") stores, for outputs far larger than the last-level cache (see
// stream_output in cpu_common.h): they write whole lines without first reading them
// (read-for-ownership), so a streaming op moves read + write instead of read + RFO + write. They
// need vector-aligned addresses, and the writing thread must fence (hwy::FlushStream) before
// another thread reads the data: parallel_for does so at the end of each thread's share.
// Streamed dtypes: f32 (one vector) and bf16 through the pair layout (one vector of u16); other
// dtypes keep ordinary stores.
#if HWY_TARGET != HWY_SCALAR
template <typename T>
inline constexpr bool kStreamable = std::is_same_v<T, float> || std::is_same_v<T, hwy::bfloat16_t>;
#else
template <typename T>
inline constexpr bool kStreamable = false;
#endif

// Elements before the first vector-aligned element at or after y (all n when y's address is not
// a multiple of sizeof(T), so that no element starts on the boundary).
template <typename T>
HWY_INLINE int64_t ElementsBeforeAlignment(const T* y, int64_t n) {
  const size_t bytes = hn::Lanes(DF()) * sizeof(float);
  const size_t mis = reinterpret_cast<uintptr_t>(y) % bytes;
  if (mis % sizeof(T) != 0) return n;
  return std::min<int64_t>(n, static_cast<int64_t>((bytes - mis) % bytes / sizeof(T)));
}

// Inputs of MapRow: a row of T, read like the output row (bf16 through the pair layout), or an f32
// per-column vector arranged to match (ArrangeColumns in cpu_norm.cpp: in each whole chunk of
// 2 Lanes columns of a pair-layout row, the even columns, then the odd ones).
template <typename T>
struct RowOf {
  const T* p;
};
struct ColumnsOf {
  const float* p;
};

// One vector of f32 lanes at element i, and the first r (< Lanes) of them (the rest zero).
template <typename T>
HWY_INLINE VF LoadAt(DF df, RowOf<T> in, int64_t i) {
  return LoadF(df, in.p + i);
}
HWY_INLINE VF LoadAt(DF df, ColumnsOf in, int64_t i) { return hn::LoadU(df, in.p + i); }
template <typename T>
HWY_INLINE VF LoadTailAt(DF df, RowOf<T> in, int64_t i, size_t r) {
  return LoadFN(df, in.p + i, r);
}
HWY_INLINE VF LoadTailAt(DF df, ColumnsOf in, int64_t i, size_t r) { return LoadFN(df, in.p + i, r); }

#if HWY_TARGET != HWY_SCALAR
// A pair step reads 2 Lanes elements from i: a pair-layout row as one raw vector (loaded once,
// EvenOf/OddOf widen its halves); per-column vectors as their two arranged halves.
HWY_INLINE hn::Vec<DU32> PairStepAt(DF, RowOf<hwy::bfloat16_t> in, int64_t i) {
  const hn::Repartition<uint16_t, DF> du16;
  return hn::BitCast(DU32(), hn::LoadU(du16, reinterpret_cast<const uint16_t*>(in.p + i)));
}
HWY_INLINE ColumnsOf PairStepAt(DF, ColumnsOf in, int64_t i) { return ColumnsOf{in.p + i}; }
HWY_INLINE VF EvenOf(DF df, ColumnsOf c) { return hn::LoadU(df, c.p); }
HWY_INLINE VF OddOf(DF df, ColumnsOf c) { return hn::LoadU(df, c.p + hn::Lanes(df)); }

// The store policy of MapRow's loop: ordinary stores, or non-temporal ones (kStream).
template <bool kStream>
HWY_INLINE void PutF32(DF df, VF v, float* p) {
  if constexpr (kStream)
    hn::Stream(v, df, p);
  else
    hn::StoreU(v, df, p);
}
template <bool kStream>
HWY_INLINE void PutBf16Pairs(DF df, VF even, VF odd, hwy::bfloat16_t* p) {
  const auto packed = PackBf16Pairs(df, even, odd);
  if constexpr (kStream)
    hn::Stream(packed, DU16(), reinterpret_cast<uint16_t*>(p));
  else
    hn::StoreU(packed, DU16(), reinterpret_cast<uint16_t*>(p));
}
#endif

#if HWY_TARGET != HWY_SCALAR
// One pair step of MapVectors: every input's even and odd f32 lanes first, then fn on the even
// lanes and on the odd ones, packed and stored. Widening all inputs before either call keeps both
// halves' work in flight together (written as one variadic call, the compiler emitted the odd
// half's loads after the even half's arithmetic: 7% slower per element, measured on Zen3), hence
// one overload per input count. Three inputs are a row and two per-column vectors (the norms):
// the row's halves first, each column half loaded where it is used.
template <bool kStream, typename Fn, typename S0>
HWY_INLINE void PairStep(DF df, Fn& fn, hwy::bfloat16_t* y, S0 s0) {
  const VF e0 = EvenOf(df, s0), o0 = OddOf(df, s0);
  PutBf16Pairs<kStream>(df, fn(e0), fn(o0), y);
}
template <bool kStream, typename Fn, typename S0, typename S1>
HWY_INLINE void PairStep(DF df, Fn& fn, hwy::bfloat16_t* y, S0 s0, S1 s1) {
  const VF e0 = EvenOf(df, s0), o0 = OddOf(df, s0), e1 = EvenOf(df, s1), o1 = OddOf(df, s1);
  PutBf16Pairs<kStream>(df, fn(e0, e1), fn(o0, o1), y);
}
template <bool kStream, typename Fn, typename S0, typename S1, typename S2>
HWY_INLINE void PairStep(DF df, Fn& fn, hwy::bfloat16_t* y, S0 s0, S1 s1, S2 s2) {
  const VF e0 = EvenOf(df, s0), o0 = OddOf(df, s0);
  const VF ye = fn(e0, EvenOf(df, s1), EvenOf(df, s2));
  const VF yo = fn(o0, OddOf(df, s1), OddOf(df, s2));
  PutBf16Pairs<kStream>(df, ye, yo, y);
}
#endif

// The whole vectors of y[i, n) = fn(inputs): bf16 rows in pair steps (fn sees even and odd
// elements in separate calls, which an element-wise fn cannot tell apart), then single vectors;
// returns where it stopped. kStream (f32 or bf16 y, vector-aligned at i) writes non-temporally and
// covers only the main step (pairs for bf16), leaving the rest to the ordinary stores.
template <bool kStream, typename T, typename Fn, typename... In>
HWY_INLINE int64_t MapVectors(Fn& fn, T* y, int64_t i, int64_t n, In... in) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
#if HWY_TARGET != HWY_SCALAR  // the pair layout
  if constexpr (std::is_same_v<T, hwy::bfloat16_t>) {
    for (; i + 2 * N <= n; i += 2 * N) PairStep<kStream>(df, fn, y + i, PairStepAt(df, in, i)...);
  }
  if constexpr (kStream) {
    static_assert(kStreamable<T>, "streamed rows are f32 or bf16");
    if constexpr (std::is_same_v<T, float>) {
      for (; i + N <= n; i += N) PutF32<true>(df, fn(LoadAt(df, in, i)...), y + i);
    }
    return i;
  }
#endif
  for (; i + N <= n; i += N) StoreF(df, fn(LoadAt(df, in, i)...), y + i);
  return i;
}

// y[i] = fn(inputs at i) over n elements in f32 lanes, with a partial vector at the tail: the one
// loop of every element-wise and row-norm kernel (1 or 2 rows; a row and per-column vectors).
// kStream: non-temporal stores from the first vector-aligned element of y on (ordinary ones for
// the unaligned head and the partial tail). With per-column inputs the columns' arrangement
// starts at element 0, so there is no head to peel: y is streamed only when it starts aligned.
template <bool kStream = false, typename T, typename Fn, typename... In>
HWY_INLINE void MapRow(T* y, int64_t n, Fn fn, In... in) {
  const DF df;
  int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  if constexpr (kStream && kStreamable<T>) {
    constexpr bool kColumns = (std::is_same_v<In, ColumnsOf> || ...);
    const int64_t head = ElementsBeforeAlignment(y, n);
    if constexpr (kColumns) {
      if (head == 0) i = MapVectors<true>(fn, y, 0, n, in...);
    } else {
      MapRow<false>(y, head, fn, in...);
      i = MapVectors<true>(fn, y, head, n, in...);
    }
  }
#endif
  i = MapVectors<false>(fn, y, i, n, in...);
  if (i < n) {
    const size_t r = static_cast<size_t>(n - i);
    StoreFN(df, fn(LoadTailAt(df, in, i, r)...), y + i, r);
  }
}

// One row in, one out.
template <bool kStream = false, typename T, typename Fn>
HWY_INLINE void MapRow1(const T* x, T* y, int64_t n, Fn fn) {
  MapRow<kStream>(y, n, fn, RowOf<T>{x});
}

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLUXRT_BACKEND_CPU_SIMD_INL_H_
