// The row passes of the oneDNN attention (attention_onednn_rows.h): Highway code compiled once
// per target through foreach_target.h, called through the dispatch table by the wrappers at the
// end of the file.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/attention_onednn_rows.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/cpu/attention_exp2-inl.h"
#include "backend/cpu/attention_onednn_rows.h"
#include "backend/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {
using namespace detail;

// p_j = 2^(c s_j - m + maskadd_j) for j < n (a multiple of the vector length), stored as kStore
// says; returns the sum of the stored values, so the weights P·V applies sum to exactly l.
// One instantiation per store and mask so that the loop carries no branch.
template <int kStore, bool kMasked>
float ExpRowT(const float* HWY_RESTRICT s, int64_t n, float c, float m, const float* HWY_RESTRICT maskadd,
              void* HWY_RESTRICT p) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF vc = hn::Set(d, c), vneg_m = hn::Set(d, -m);
  VF sum = hn::Zero(d);
  for (int64_t j = 0; j < n; j += N) {
    VF x = hn::MulAdd(hn::LoadU(d, s + j), vc, vneg_m);
    if constexpr (kMasked) x = hn::Add(x, hn::LoadU(d, maskadd + j));
    if constexpr (kStore == kStoreF32) {
      const VF e = AttentionExp2<7>(d, x);
      hn::StoreU(e, d, static_cast<float*>(p) + j);
      sum = hn::Add(sum, e);
    } else {
      // AttentionExp2 clamps its argument (a NaN becomes -127), so e is finite and >= 0 and
      // round-to-nearest-even to bf16 is one integer add of 0x7FFF plus the kept bit's parity.
      const auto bits = hn::BitCast(du, AttentionExp2<4>(d, x));
      const auto odd = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
      const auto rounded = hn::Add(bits, hn::Add(odd, hn::Set(du, 0x7FFFu)));
      const VF e = hn::BitCast(d, hn::And(rounded, hn::Set(du, 0xFFFF0000u)));
      if constexpr (kStore == kStoreBf16) {
        const hn::Rebind<uint16_t, DF> du16;
        hn::StoreU(hn::TruncateTo(du16, hn::ShiftRight<16>(rounded)), du16,
                   reinterpret_cast<uint16_t*>(static_cast<hwy::bfloat16_t*>(p) + j));
      } else {
        hn::StoreU(e, d, static_cast<float*>(p) + j);
      }
      sum = hn::Add(sum, e);
    }
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

#if HWY_TARGET == HWY_AVX3
// ExpRowT<kStoreBf16> with the AVX512_BF16 instructions: VCVTNE2PS2BF16 rounds two vectors of
// probabilities to bf16 (round to nearest even, as the integer rounding above) in one
// instruction, and the row sum is VDPBF16PS of the stored bf16 row with ones, i.e. the sum of
// exactly the weights P·V applies, accumulated in f32 (in another order than lane by lane, an f32
// rounding apart) with the denormals P·V's own VDPBF16PS ignores ignored too. On 2 Zen5 cores
// klein-4B attention at L = 4608 went from 353-370 ms to 337-343 ms (three runs each,
// alternating); at L = 8704 it made no difference (1194-1229 ms against 1222-1237). n is a
// multiple of 32 (keys are padded to 64).
template <bool kMasked>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) float ExpRowBf16Native(
    const float* HWY_RESTRICT s, int64_t n, float c, float m, const float* HWY_RESTRICT maskadd,
    uint16_t* HWY_RESTRICT p) {
  const DF d;
  static_assert(MaxLanes(DF()) == 16, "the AVX3 target's f32 vectors are 16 lanes");
  const VF vc = hn::Set(d, c), vneg_m = hn::Set(d, -m);
  const __m512bh ones = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3F80));  // bf16 1.0
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 32) {
    VF x0 = hn::MulAdd(hn::LoadU(d, s + j), vc, vneg_m);
    VF x1 = hn::MulAdd(hn::LoadU(d, s + j + 16), vc, vneg_m);
    if constexpr (kMasked) {
      x0 = hn::Add(x0, hn::LoadU(d, maskadd + j));
      x1 = hn::Add(x1, hn::LoadU(d, maskadd + j + 16));
    }
    // The low 16 bf16 of the result come from the second operand.
    const __m512bh pair = _mm512_cvtne2ps_pbh(AttentionExp2<4>(d, x1).raw, AttentionExp2<4>(d, x0).raw);
    _mm512_storeu_si512(p + j, reinterpret_cast<__m512i>(pair));
    sum = _mm512_dpbf16_ps(sum, pair, ones);
  }
  return _mm512_reduce_add_ps(sum);
}

bool CpuHasAvx512Bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  return has;
}
#endif

float ExpRow(const float* HWY_RESTRICT s, int64_t n, float c, float m, const float* HWY_RESTRICT maskadd,
             void* HWY_RESTRICT p, int store) {
#if HWY_TARGET == HWY_AVX3
  if (store == kStoreBf16 && n % 32 == 0 && CpuHasAvx512Bf16()) {
    uint16_t* out = static_cast<uint16_t*>(p);
    return maskadd ? ExpRowBf16Native<true>(s, n, c, m, maskadd, out)
                   : ExpRowBf16Native<false>(s, n, c, m, maskadd, out);
  }
#endif
  switch (store * 2 + (maskadd != nullptr)) {
    case kStoreF32 * 2:
      return ExpRowT<kStoreF32, false>(s, n, c, m, maskadd, p);
    case kStoreF32 * 2 + 1:
      return ExpRowT<kStoreF32, true>(s, n, c, m, maskadd, p);
    case kStoreF32AsBf16 * 2:
      return ExpRowT<kStoreF32AsBf16, false>(s, n, c, m, maskadd, p);
    case kStoreF32AsBf16 * 2 + 1:
      return ExpRowT<kStoreF32AsBf16, true>(s, n, c, m, maskadd, p);
    case kStoreBf16 * 2:
      return ExpRowT<kStoreBf16, false>(s, n, c, m, maskadd, p);
    default:
      return ExpRowT<kStoreBf16, true>(s, n, c, m, maskadd, p);
  }
}

// max_j (c s_j + maskadd_j) over j < n (a multiple of the vector length).
float MaxScaledRow(const float* HWY_RESTRICT s, int64_t n, float c, const float* HWY_RESTRICT maskadd) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF vc = hn::Set(d, c);
  VF mx = hn::Set(d, -std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < n; j += N) {
    VF x = hn::Mul(hn::LoadU(d, s + j), vc);
    if (maskadd) x = hn::Add(x, hn::LoadU(d, maskadd + j));
    mx = hn::Max(mx, x);
  }
  return hn::GetLane(hn::MaxOfLanes(d, mx));
}

// One q, k or v row for the primitives: n elements of src as f32, rotated by RoPE when cos is
// given (`half_split`: pairs (j, j + n/2), else adjacent pairs), rounded to bf16 unless store is
// kStoreF32, written to dst as store says; *norm2 gets the squared norm of what was written,
// summed in f64. The rotation is rope_rotate_row's formula, so both attention implementations
// rotate alike (to an f32 rounding where the compiler fuses a product and a sum). Returns false,
// touching nothing, for a row off this target's vector grid; the caller then takes the scalar
// helpers.
template <typename T>
bool PrepareRowT(const T* HWY_RESTRICT src, int64_t n, const float* HWY_RESTRICT cos,
                 const float* HWY_RESTRICT sin, bool half_split, int store, void* HWY_RESTRICT dst,
                 double* norm2) {
#if HWY_TARGET == HWY_SCALAR
  (void)src, (void)n, (void)cos, (void)sin, (void)half_split, (void)store, (void)dst, (void)norm2;
  return false;  // no pairs inside one lane, no f64 halves: the scalar helpers are this target
#else
  const DF d;
  const hn::Half<DF> dh;
  const hn::Rebind<double, decltype(dh)> dd;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), half = n / 2;
  if (n % N != 0 || (cos != nullptr && half_split && half % N != 0)) return false;
  auto acc = hn::Zero(dd);
  auto finish = [&](int64_t j, VF y) {
    if (store != kStoreF32) y = RoundTo<hwy::bfloat16_t>(d, y);
    if (store == kStoreBf16)
      StoreF(d, y, static_cast<hwy::bfloat16_t*>(dst) + j);
    else
      hn::StoreU(y, d, static_cast<float*>(dst) + j);
    const auto lo = hn::PromoteTo(dd, hn::LowerHalf(dh, y));
    const auto hi = hn::PromoteTo(dd, hn::UpperHalf(dh, y));
    acc = hn::MulAdd(lo, lo, hn::MulAdd(hi, hi, acc));
  };
  if (cos == nullptr) {
    for (int64_t j = 0; j < n; j += N) finish(j, LoadF(d, src + j));
  } else if (half_split) {
    for (int64_t j = 0; j < half; j += N) {
      const VF xa = LoadF(d, src + j), xb = LoadF(d, src + j + half);
      const VF c = hn::LoadU(d, cos + j), sn = hn::LoadU(d, sin + j);
      finish(j, hn::Sub(hn::Mul(xa, c), hn::Mul(xb, sn)));
      finish(j + half, hn::Add(hn::Mul(xb, c), hn::Mul(xa, sn)));
    }
  } else {
    // Lanes (2i, 2i + 1) hold pair i: each table entry is widened to both lanes of its pair
    // (u32 -> u64, then the copy shifted into the upper half), and with the odd lanes' sine
    // negated y = x cos - swap(x) sin gives x_a cos - x_b sin and x_b cos + x_a sin.
    const hn::Repartition<uint64_t, DF> d64;
    const hn::Rebind<uint32_t, decltype(d64)> d32;
    const hn::RebindToUnsigned<DF> du;
    const auto odd_sign = hn::BitCast(d, hn::OddEven(hn::Set(du, 0x80000000u), hn::Zero(du)));
    auto pairs = [&](const float* t, int64_t i) {
      const auto w = hn::PromoteTo(d64, hn::LoadU(d32, reinterpret_cast<const uint32_t*>(t + i)));
      return hn::BitCast(d, hn::Or(w, hn::ShiftLeft<32>(w)));
    };
    for (int64_t j = 0; j < n; j += N) {
      const VF x = LoadF(d, src + j);
      const VF c = pairs(cos, j / 2), sn = hn::Xor(pairs(sin, j / 2), odd_sign);
      finish(j, hn::Sub(hn::Mul(x, c), hn::Mul(hn::Reverse2(d, x), sn)));
    }
  }
  *norm2 = hn::GetLane(hn::SumOfLanes(dd, acc));
  return true;
#endif
}

bool PrepareRow(const void* HWY_RESTRICT src, bool src_bf16, int64_t n, const float* HWY_RESTRICT cos,
                const float* HWY_RESTRICT sin, bool half_split, int store, void* HWY_RESTRICT dst,
                double* norm2) {
  if (src_bf16)
    return PrepareRowT(static_cast<const hwy::bfloat16_t*>(src), n, cos, sin, half_split, store, dst, norm2);
  return PrepareRowT(static_cast<const float*>(src), n, cos, sin, half_split, store, dst, norm2);
}

size_t Lanes() { return hn::Lanes(DF()); }

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fluxrt::backend::cpu {
HWY_EXPORT(ExpRow);
HWY_EXPORT(MaxScaledRow);
HWY_EXPORT(Lanes);
HWY_EXPORT(PrepareRow);

namespace detail {

float exp_row(const float* s, int64_t n, float c, float m, const float* maskadd, void* p, int store) {
  return HWY_DYNAMIC_DISPATCH(ExpRow)(s, n, c, m, maskadd, p, store);
}

float max_scaled_row(const float* s, int64_t n, float c, const float* maskadd) {
  return HWY_DYNAMIC_DISPATCH(MaxScaledRow)(s, n, c, maskadd);
}

bool prepare_row_vectorized(const void* src, bool src_bf16, int64_t n, const float* cos, const float* sin,
                            bool half_split, int store, void* dst, double* norm2) {
  return HWY_DYNAMIC_DISPATCH(PrepareRow)(src, src_bf16, n, cos, sin, half_split, store, dst, norm2);
}

size_t row_lanes() { return HWY_DYNAMIC_DISPATCH(Lanes)(); }

}  // namespace detail
}  // namespace fluxrt::backend::cpu
#endif  // HWY_ONCE
