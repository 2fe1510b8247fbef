// Dequantization of GGML blocks in Highway SIMD: the same code on every target, bit-identical to
// core/quant.cpp's scalar reference (the same f32 operations in the same order; this file is
// compiled with -ffp-contract=off, CMakeLists.txt, so no multiply-add is fused). Vectors are
// capped at 16 f32 lanes: every run of values that shares one scale is a multiple of 16, so a
// vector never straddles two scales. tests/ops/test_linear_quant.cpp checks it against the
// reference for every type.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/dequant_cpu.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstring>

#include "backend/cpu/dequant_cpu.h"
#include "core/dtype.h"
#include "core/error.h"

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DQ = hn::CappedTag<float, 16>;
using DQI = hn::RebindToSigned<DQ>;
using DQU = hn::RebindToUnsigned<DQ>;
using VQ = hn::Vec<DQ>;
using VQI = hn::Vec<DQI>;

inline float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// (p[k] >> shift) & mask for the lanes' k, as i32.
HWY_INLINE VQI Bits(const uint8_t* p, int shift, int mask) {
  const DQI di;
  const hn::Rebind<uint8_t, DQ> du8;
  const VQI v = hn::PromoteTo(di, hn::LoadU(du8, p));
  return hn::And(hn::ShiftRightSame(v, shift), hn::Set(di, mask));
}

// Bits [first, first + lanes) of a u32, one per lane, as i32 0 or 1.
HWY_INLINE VQI BitsOfWord(uint32_t word, int first) {
  const DQU du;
  const auto shifts = hn::Iota(du, static_cast<uint32_t>(first));
  const auto bits = hn::And(hn::Set(du, word) >> shifts, hn::Set(du, 1u));
  return hn::BitCast(DQI(), bits);
}

HWY_INLINE VQ F(VQI v) { return hn::ConvertTo(DQ(), v); }

void Q8_0(const uint8_t* b, float* y) {
  const DQ df;
  const DQI di;
  const hn::Rebind<int8_t, DQ> di8;
  const VQ d = hn::Set(df, F16At(b));
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (size_t k = 0; k < 32; k += hn::Lanes(df))
    hn::StoreU(hn::Mul(F(hn::PromoteTo(di, hn::LoadU(di8, qs + k))), d), df, y + k);
}

template <bool kMin>
void Q4(const uint8_t* b, float* y) {
  const DQ df;
  const DQI di;
  const VQ d = hn::Set(df, F16At(b));
  const VQ m = hn::Set(df, kMin ? F16At(b + 2) : 0.0f);
  const uint8_t* qs = b + (kMin ? 4 : 2);
  const VQI offset = hn::Set(di, kMin ? 0 : 8);
  for (size_t k = 0; k < 16; k += hn::Lanes(df)) {
    const VQ lo = hn::Mul(d, F(hn::Sub(Bits(qs + k, 0, 0x0F), offset)));
    const VQ hi = hn::Mul(d, F(hn::Sub(Bits(qs + k, 4, 0x0F), offset)));
    hn::StoreU(kMin ? hn::Add(lo, m) : lo, df, y + k);
    hn::StoreU(kMin ? hn::Add(hi, m) : hi, df, y + 16 + k);
  }
}

template <bool kMin>
void Q5(const uint8_t* b, float* y) {
  const DQ df;
  const DQI di;
  const VQ d = hn::Set(df, F16At(b));
  const VQ m = hn::Set(df, kMin ? F16At(b + 2) : 0.0f);
  uint32_t qh;
  std::memcpy(&qh, b + (kMin ? 4 : 2), 4);
  const uint8_t* qs = b + (kMin ? 8 : 6);
  const VQI offset = hn::Set(di, kMin ? 0 : 16);
  for (size_t k = 0; k < 16; k += hn::Lanes(df)) {
    const int kk = static_cast<int>(k);
    const VQI lo = hn::Or(Bits(qs + k, 0, 0x0F), hn::ShiftLeft<4>(BitsOfWord(qh, kk)));
    const VQI hi = hn::Or(Bits(qs + k, 4, 0x0F), hn::ShiftLeft<4>(BitsOfWord(qh, kk + 16)));
    const VQ vlo = hn::Mul(d, F(hn::Sub(lo, offset)));
    const VQ vhi = hn::Mul(d, F(hn::Sub(hi, offset)));
    hn::StoreU(kMin ? hn::Add(vlo, m) : vlo, df, y + k);
    hn::StoreU(kMin ? hn::Add(vhi, m) : vhi, df, y + 16 + k);
  }
}

void Q2K(const uint8_t* b, float* y) {
  const DQ df;
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = F16At(b + 80), dmin = F16At(b + 82);
  for (int i = 0; i < 256; i += static_cast<int>(hn::Lanes(df))) {
    const int c = i / 128, s = (i / 32) % 4, l = i % 32, g = i / 16;
    const VQ dl = hn::Set(df, d * static_cast<float>(scales[g] & 0x0F));
    const VQ ml = hn::Set(df, dmin * static_cast<float>(scales[g] >> 4));
    hn::StoreU(hn::Sub(hn::Mul(dl, F(Bits(qs + c * 32 + l, 2 * s, 3))), ml), df, y + i);
  }
}

void Q3K(const uint8_t* b, float* y) {
  const DQ df;
  const DQI di;
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = F16At(b + 108);
  for (int i = 0; i < 256; i += static_cast<int>(hn::Lanes(df))) {
    const int c = i / 128, s = (i / 32) % 4, l = i % 32, g = i / 16;
    const int low = (g < 8 ? sc[g] : sc[g - 8] >> 4) & 0x0F;
    const int high = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
    const VQ dl = hn::Set(df, d * static_cast<float>((low | (high << 4)) - 32));
    const VQI ql = Bits(qs + c * 32 + l, 2 * s, 3);
    const VQI h = hn::Xor(Bits(hmask + l, i / 32, 1), hn::Set(di, 1));
    hn::StoreU(hn::Mul(dl, F(hn::Sub(ql, hn::ShiftLeft<2>(h)))), df, y + i);
  }
}

inline void ScaleMin(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 0x3F;
    *mn = s[j + 4] & 0x3F;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 2) & 0x30);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
  }
}

template <bool kFifthBit>
void Q45K(const uint8_t* b, float* y) {
  const DQ df;
  const float d = F16At(b), dmin = F16At(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (kFifthBit ? 48 : 16);
  for (int g = 0; g < 8; ++g) {
    int sc, mn;
    ScaleMin(scales, g, &sc, &mn);
    const VQ dd = hn::Set(df, d * static_cast<float>(sc));
    const VQ dm = hn::Set(df, dmin * static_cast<float>(mn));
    const int c = g / 2, s = g % 2;
    for (int l = 0; l < 32; l += static_cast<int>(hn::Lanes(df))) {
      VQI q = Bits(qs + c * 32 + l, 4 * s, 0x0F);
      if (kFifthBit) q = hn::Or(q, hn::ShiftLeft<4>(Bits(qh + l, g, 1)));
      hn::StoreU(hn::Sub(hn::Mul(dd, F(q)), dm), df, y + g * 32 + l);
    }
  }
}

void Q6K(const uint8_t* b, float* y) {
  const DQ df;
  const DQI di;
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = F16At(b + 208);
  for (int i = 0; i < 256; i += static_cast<int>(hn::Lanes(df))) {
    const int c = i / 128, r = i % 128;
    const VQI low = Bits(ql + c * 64 + r % 64, 4 * (r / 64), 0x0F);
    const VQI high = Bits(qh + c * 32 + r % 32, 2 * (r / 32), 3);
    const VQ dg = hn::Set(df, d * static_cast<float>(scales[i / 16]));
    hn::StoreU(hn::Mul(dg, F(hn::Sub(hn::Or(low, hn::ShiftLeft<4>(high)), hn::Set(di, 32)))), df, y + i);
  }
}

// fp8 -> f32 by bit arithmetic, value for value what core/dtype's f8e4m3_to_f32 / f8e5m2_to_f32
// give (a table lookup per byte would be a gather per lane). A normal value's f32 bits are the
// byte's exponent and mantissa moved up, plus the bias difference (e4m3: 127 - 7, e5m2: 127 - 15);
// a subnormal is its mantissa times the smallest step, computed in f32 exactly as the scalar code
// does (no f32 denormal arithmetic, so flush-to-zero modes cannot change it).
template <bool kE4M3>
void Fp8Row(const uint8_t* src, float* dst, int64_t n) {
  const DQ df;
  const DQI di;
  const hn::Rebind<uint8_t, DQ> du8;
  constexpr int kMantBits = kE4M3 ? 3 : 2;
  constexpr int kBiasDelta = kE4M3 ? 127 - 7 : 127 - 15;
  const VQ step = hn::Set(df, kE4M3 ? 0x1p-9f : 0x1p-16f);
  const auto lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const VQI v = hn::PromoteTo(di, hn::LoadU(du8, src + i));  // 0..255
    const VQI a = hn::And(v, hn::Set(di, 0x7F));
    const VQI exp = hn::ShiftRight<kMantBits>(a);
    if (!kE4M3 && !hn::AllFalse(di, hn::Eq(exp, hn::Set(di, 31)))) {
      for (int64_t j = i; j < i + lanes; ++j) dst[j] = f8e5m2_to_f32(src[j]);  // Inf / NaN: rare
      continue;
    }
    const VQI normal = hn::Add(hn::ShiftLeft<23 - kMantBits>(a), hn::Set(di, kBiasDelta << 23));
    const VQ subnormal = hn::Mul(hn::ConvertTo(df, hn::And(a, hn::Set(di, (1 << kMantBits) - 1))), step);
    VQI bits = hn::IfThenElse(hn::Eq(exp, hn::Zero(di)), hn::BitCast(di, subnormal), normal);
    // e4m3fn has no infinities; S.1111.111 is its NaN, kept quiet with the mantissa bits.
    if (kE4M3) bits = hn::IfThenElse(hn::Eq(a, hn::Set(di, 0x7F)), hn::Set(di, 0x7FF00000), bits);
    const VQI sign = hn::ShiftLeft<24>(hn::And(v, hn::Set(di, 0x80)));
    hn::StoreU(hn::BitCast(df, hn::Or(bits, sign)), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = kE4M3 ? f8e4m3_to_f32(src[i]) : f8e5m2_to_f32(src[i]);
}

void DequantizeRowImpl(QuantType type, const uint8_t* src, float* dst, int64_t n) {
  const QuantTraits& t = quant_traits(type);
  void (*block_fn)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case QuantType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case QuantType::F16:
      convert(src, DType::F16, dst, DType::F32, static_cast<size_t>(n));
      return;
    case QuantType::BF16:
      convert(src, DType::BF16, dst, DType::F32, static_cast<size_t>(n));
      return;
    case QuantType::F8E4M3:
      Fp8Row<true>(src, dst, n);
      return;
    case QuantType::F8E5M2:
      Fp8Row<false>(src, dst, n);
      return;
    case QuantType::Q8_0:
      block_fn = Q8_0;
      break;
    case QuantType::Q4_0:
      block_fn = Q4<false>;
      break;
    case QuantType::Q4_1:
      block_fn = Q4<true>;
      break;
    case QuantType::Q5_0:
      block_fn = Q5<false>;
      break;
    case QuantType::Q5_1:
      block_fn = Q5<true>;
      break;
    case QuantType::Q2_K:
      block_fn = Q2K;
      break;
    case QuantType::Q3_K:
      block_fn = Q3K;
      break;
    case QuantType::Q4_K:
      block_fn = Q45K<false>;
      break;
    case QuantType::Q5_K:
      block_fn = Q45K<true>;
      break;
    case QuantType::Q6_K:
      block_fn = Q6K;
      break;
  }
  FLUXRT_CHECK(block_fn != nullptr, ErrorCode::Internal, "dequantize_row_cpu: unhandled type {}", t.name);
  const int64_t blocks = n / t.block;
  for (int64_t i = 0; i < blocks; ++i) block_fn(src + i * t.block_bytes, dst + i * t.block);
}

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fluxrt::backend::cpu {

HWY_EXPORT(DequantizeRowImpl);

void dequantize_row_cpu(QuantType type, const uint8_t* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(DequantizeRowImpl)(type, src, dst, n);
}

void dequantize_row_part_cpu(const QuantizedMatrix& q, int64_t r, int64_t k0, int64_t n, float* dst) {
  const QuantTraits& t = quant_traits(q.type);
  dequantize_row_cpu(q.type, q.row(r) + static_cast<size_t>(k0 / t.block) * t.block_bytes, dst, n);
  if (q.scale.defined()) {
    const float s = q.row_scale(r);
    for (int64_t j = 0; j < n; ++j) dst[j] = scaled_weight(dst[j], s);
  }
}

void dequantize_rows_cpu(const QuantizedMatrix& q, int64_t r0, int64_t count, float* dst, int64_t ld) {
  for (int64_t r = 0; r < count; ++r) {
    float* out = dst + r * ld;
    dequantize_row_cpu(q.type, q.row(r0 + r), out, q.cols);
    if (q.scale.defined()) {
      const float s = q.row_scale(r0 + r);
      for (int64_t j = 0; j < q.cols; ++j) out[j] = scaled_weight(out[j], s);
    }
  }
}

}  // namespace fluxrt::backend::cpu
#endif  // HWY_ONCE
