// Dtype table, fp8 scalars and the bulk convert(). The hot pairs (bf16/f16 <-> f32) run as
// Highway SIMD with dynamic dispatch; their lanes compute exactly what the inline scalars in
// dtype.h compute, so the SIMD body and the scalar tail agree bit for bit on every target.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/dtype.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "core/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace fluxrt {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void Bf16ToF32(const uint16_t* HWY_RESTRICT src, float* HWY_RESTRICT dst, size_t n) {
  const hn::ScalableTag<uint32_t> du;
  const hn::Rebind<uint16_t, decltype(du)> d16;
  const hn::RebindToFloat<decltype(du)> df;
  const size_t lanes = hn::Lanes(du);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto w = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, src + i)));
    hn::StoreU(hn::BitCast(df, w), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void F32ToBf16(const float* HWY_RESTRICT src, uint16_t* HWY_RESTRICT dst, size_t n) {
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToSigned<decltype(du)> di;
  const hn::RebindToFloat<decltype(du)> df;
  const hn::Rebind<uint16_t, decltype(du)> d16;
  const size_t lanes = hn::Lanes(du);
  const auto k_abs = hn::Set(du, 0x7FFFFFFFu);
  const auto k_inf = hn::Set(di, 0x7F800000);
  const auto k_bias = hn::Set(du, 0x7FFFu);
  const auto k_one = hn::Set(du, 1u);
  const auto k_nan = hn::Set(du, kBF16NaNFromF32);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto u = hn::BitCast(du, hn::LoadU(df, src + i));
    const auto lsb = hn::And(hn::ShiftRight<16>(u), k_one);
    auto r = hn::ShiftRight<16>(hn::Add(hn::Add(u, k_bias), lsb));
    const auto is_nan = hn::RebindMask(du, hn::Gt(hn::BitCast(di, hn::And(u, k_abs)), k_inf));
    r = hn::IfThenElse(is_nan, k_nan, r);
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, r)), d16, dst + i);
  }
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void F16ToF32(const uint16_t* HWY_RESTRICT src, float* HWY_RESTRICT dst, size_t n) {
  const hn::ScalableTag<int32_t> di;
  const hn::Rebind<uint16_t, decltype(di)> d16;
  const hn::RebindToUnsigned<decltype(di)> du;
  const hn::RebindToFloat<decltype(di)> df;
  const size_t lanes = hn::Lanes(di);
  const auto k_sign = hn::Set(di, 0x8000);
  const auto k_abs = hn::Set(di, 0x7FFF);
  const auto k_inf = hn::Set(di, 0x7C00);
  const auto k_min_normal = hn::Set(di, 0x0400);
  const auto k_rebias = hn::Set(di, 0x38000000);
  const auto k_exp_all = hn::Set(di, 0x70000000);
  const auto k_quiet = hn::Set(di, 0x00400000);
  const auto k_sub_scale = hn::Set(df, 0x1p-24f);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto h = hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d16, src + i)));
    const auto sign = hn::ShiftLeft<16>(hn::And(h, k_sign));
    const auto a = hn::And(h, k_abs);
    const auto shifted = hn::ShiftLeft<13>(a);
    const auto normal = hn::Add(shifted, k_rebias);
    auto special = hn::Or(shifted, k_exp_all);  // 0x7F800000 | payload << 13
    special = hn::IfThenElse(hn::Gt(a, k_inf), hn::Or(special, k_quiet), special);
    const auto sub = hn::BitCast(di, hn::Mul(hn::ConvertTo(df, a), k_sub_scale));
    auto r = hn::IfThenElse(hn::Lt(a, k_inf), normal, special);
    r = hn::IfThenElse(hn::Lt(a, k_min_normal), sub, r);
    hn::StoreU(hn::BitCast(df, hn::Or(r, sign)), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void F32ToF16(const float* HWY_RESTRICT src, uint16_t* HWY_RESTRICT dst, size_t n) {
  const hn::ScalableTag<int32_t> di;
  const hn::RebindToFloat<decltype(di)> df;
  const hn::Rebind<uint16_t, decltype(di)> d16;
  const size_t lanes = hn::Lanes(di);
  const auto k_abs = hn::Set(di, 0x7FFFFFFF);
  const auto k_inf32 = hn::Set(di, 0x7F800000);
  const auto k_overflow = hn::Set(di, 0x47800000);
  const auto k_min_normal = hn::Set(di, 0x38800000);
  const auto k_rebias = hn::Set(di, 0x38000000 - 0x0FFF);
  const auto k_one = hn::Set(di, 1);
  const auto k_sign = hn::Set(di, 0x8000);
  const auto k_nan = hn::Set(di, 0x7E00);
  const auto k_payload = hn::Set(di, 0x3FF);
  const auto k_inf16 = hn::Set(di, 0x7C00);
  const auto k_half = hn::Set(df, 0.5f);
  const auto k_half_bits = hn::Set(di, 0x3F000000);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto u = hn::BitCast(di, hn::LoadU(df, src + i));
    const auto sign = hn::And(hn::ShiftRight<16>(u), k_sign);  // arithmetic shift, then mask
    const auto a = hn::And(u, k_abs);
    const auto a13 = hn::ShiftRight<13>(a);
    const auto nan = hn::Or(k_nan, hn::And(a13, k_payload));
    const auto normal = hn::ShiftRight<13>(hn::Add(hn::Sub(a, k_rebias), hn::And(a13, k_one)));
    const auto sub = hn::Sub(hn::BitCast(di, hn::Add(hn::BitCast(df, a), k_half)), k_half_bits);
    auto r = hn::IfThenElse(hn::Lt(a, k_min_normal), sub, normal);
    r = hn::IfThenElse(hn::Lt(a, k_overflow), r, k_inf16);
    r = hn::IfThenElse(hn::Gt(a, k_inf32), nan, r);
    hn::StoreU(hn::DemoteTo(d16, hn::Or(r, sign)), d16, dst + i);
  }
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace fluxrt
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "core/threads.h"

namespace fluxrt {

HWY_EXPORT(Bf16ToF32);
HWY_EXPORT(F32ToBf16);
HWY_EXPORT(F16ToF32);
HWY_EXPORT(F32ToF16);

namespace {

using dtype_detail::bits_float;
using dtype_detail::float_bits;

struct DTypeInfo {
  DType dtype;
  size_t size;
  const char* name;
  const char* safetensors;
  bool is_float;
};

constexpr DTypeInfo kInfo[] = {
    {DType::F64, 8, "f64", "F64", true},        {DType::F32, 4, "f32", "F32", true},
    {DType::F16, 2, "f16", "F16", true},        {DType::BF16, 2, "bf16", "BF16", true},
    {DType::F8E4M3, 1, "f8e4m3", "F8_E4M3", true}, {DType::F8E5M2, 1, "f8e5m2", "F8_E5M2", true},
    {DType::I64, 8, "i64", "I64", false},       {DType::I32, 4, "i32", "I32", false},
    {DType::I16, 2, "i16", "I16", false},       {DType::I8, 1, "i8", "I8", false},
    {DType::U8, 1, "u8", "U8", false},          {DType::Bool, 1, "bool", "BOOL", false},
};

const DTypeInfo& info(DType dtype) {
  for (const auto& i : kInfo)
    if (i.dtype == dtype) return i;
  fail(ErrorCode::Internal, "dtype.cpp: unknown dtype {}", static_cast<int>(dtype));
}

}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }
bool dtype_is_float(DType dtype) { return info(dtype).is_float; }
std::string_view dtype_safetensors_name(DType dtype) { return info(dtype).safetensors; }

bool dtype_from_safetensors(std::string_view text, DType* out) {
  for (const auto& i : kInfo) {
    if (text == i.safetensors) {
      *out = i.dtype;
      return true;
    }
  }
  return false;
}

// ---- float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN, max 448.

float f8e4m3_to_f32(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t a = v & 0x7Fu;
  if (a == 0x7F) return bits_float(sign | 0x7FF00000u);  // NaN keeps its mantissa bits, quiet
  const uint32_t exp = a >> 3, mant = a & 0x7u;
  if (exp == 0) return bits_float(sign | float_bits(static_cast<float>(mant) * 0x1p-9f));
  return bits_float(sign | (exp + 127 - 7) << 23 | mant << 20);
}

uint8_t f32_to_f8e4m3(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7F;
  if (a > 0x43E00000u) return sign | 0x7E;  // beyond 448 (and Inf): saturate
  if (a < (121u << 23)) {
    // Below the smallest normal (2^-6): adding 2^14 puts the subnormal step 2^-9 at the last
    // mantissa bit, so the FPU rounds to nearest even.
    const uint32_t magic = 141u << 23;
    return sign | static_cast<uint8_t>(float_bits(bits_float(a) + bits_float(magic)) - magic);
  }
  const uint32_t mant_odd = (a >> 20) & 1u;
  return sign | static_cast<uint8_t>((a + (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu + mant_odd) >> 20);
}

// ---- float8_e5m2: bias 15, IEEE-like with Inf and NaN (the top byte of an f16).

uint8_t f32_to_f8e5m2(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7F;
  if (a >= (143u << 23)) return sign | 0x7C;  // >= 65536 rounds past 57344 (61440.. -> Inf too)
  if (a < (113u << 23)) {                     // below 2^-14: subnormal step 2^-16
    const uint32_t magic = 134u << 23;
    return sign | static_cast<uint8_t>(float_bits(bits_float(a) + bits_float(magic)) - magic);
  }
  const uint32_t mant_odd = (a >> 21) & 1u;
  return sign | static_cast<uint8_t>((a + (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFFFu + mant_odd) >> 21);
}

// ---- bulk conversion
//
// Every pair gets its own loop, instantiated from a load (element -> "value": double for f64,
// float for the other float types, int64 for integers and bool) and a store (value -> element)
// that follow c10::convert: narrow floats are built from a float, so f64 and i64 sources round
// twice (first to f32) exactly as torch does.

namespace {

template <DType T> struct Elem;
template <> struct Elem<DType::F64> {
  using Storage = double;
  static double load(double v) { return v; }
};
template <> struct Elem<DType::F32> {
  using Storage = float;
  static float load(float v) { return v; }
};
template <> struct Elem<DType::F16> {
  using Storage = uint16_t;
  static float load(uint16_t v) { return f16_to_f32(v); }
};
template <> struct Elem<DType::BF16> {
  using Storage = uint16_t;
  static float load(uint16_t v) { return bf16_to_f32(v); }
};
template <> struct Elem<DType::F8E4M3> {
  using Storage = uint8_t;
  static float load(uint8_t v) { return f8e4m3_to_f32(v); }
};
template <> struct Elem<DType::F8E5M2> {
  using Storage = uint8_t;
  static float load(uint8_t v) { return f8e5m2_to_f32(v); }
};
template <DType T, typename S> struct IntElem {
  using Storage = S;
  static int64_t load(S v) { return static_cast<int64_t>(v); }
};
template <> struct Elem<DType::I64> : IntElem<DType::I64, int64_t> {};
template <> struct Elem<DType::I32> : IntElem<DType::I32, int32_t> {};
template <> struct Elem<DType::I16> : IntElem<DType::I16, int16_t> {};
template <> struct Elem<DType::I8> : IntElem<DType::I8, int8_t> {};
template <> struct Elem<DType::U8> : IntElem<DType::U8, uint8_t> {};
template <> struct Elem<DType::Bool> {
  using Storage = uint8_t;
  static int64_t load(uint8_t v) { return v != 0; }
};

// x86's cvttss2si/cvttsd2si: truncation, and INT_MIN ("integer indefinite") for NaN and
// anything outside the range. Written out so the result is the same on every CPU.
template <typename V>
int32_t truncate_i32(V v) {
  const double d = static_cast<double>(v);
  if (!(d > -2147483649.0 && d < 2147483648.0)) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(d);
}
template <typename V>
int64_t truncate_i64(V v) {
  const double d = static_cast<double>(v);
  if (!(d >= -0x1p63 && d < 0x1p63)) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(d);
}

constexpr bool is_narrow_float(DType t) {
  return t == DType::F16 || t == DType::F8E4M3 || t == DType::F8E5M2;
}

template <DType Src, DType Dst, typename V>
typename Elem<Dst>::Storage store(V v) {
  constexpr bool kInt = std::is_integral_v<V>;
  if constexpr (Dst == DType::F64) {
    return static_cast<double>(v);
  } else if constexpr (Dst == DType::F32) {
    return static_cast<float>(v);
  } else if constexpr (Dst == DType::F16) {
    return f32_to_f16(static_cast<float>(v));
  } else if constexpr (Dst == DType::BF16) {
    // torch narrows f16/fp8 through the scalar c10 constructor (NaN -> 0x7FC0) but f32/f64
    // through its SIMD kernel (NaN -> 0xFFFF).
    if constexpr (is_narrow_float(Src)) {
      if (std::isnan(v)) return kBF16NaNFromNarrow;
    }
    return f32_to_bf16(static_cast<float>(v));
  } else if constexpr (Dst == DType::F8E4M3) {
    return f32_to_f8e4m3(static_cast<float>(v));
  } else if constexpr (Dst == DType::F8E5M2) {
    return f32_to_f8e5m2(static_cast<float>(v));
  } else if constexpr (Dst == DType::Bool) {
    return v != 0;
  } else if constexpr (kInt) {
    return static_cast<typename Elem<Dst>::Storage>(v);  // wraps (two's complement)
  } else if constexpr (Dst == DType::I64) {
    return truncate_i64(v);
  } else if constexpr (Dst == DType::U8) {
    return static_cast<uint8_t>(truncate_i64(v));  // c10 casts to unsigned through int64
  } else {
    return static_cast<typename Elem<Dst>::Storage>(truncate_i32(v));
  }
}

template <DType Src, DType Dst>
void convert_loop(const void* src, void* dst, size_t n) {
  const auto* s = static_cast<const typename Elem<Src>::Storage*>(src);
  auto* d = static_cast<typename Elem<Dst>::Storage*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] = store<Src, Dst>(Elem<Src>::load(s[i]));
}

template <DType Src>
void convert_from(const void* src, void* dst, DType dst_dtype, size_t n) {
  switch (dst_dtype) {
    case DType::F64: return convert_loop<Src, DType::F64>(src, dst, n);
    case DType::F32: return convert_loop<Src, DType::F32>(src, dst, n);
    case DType::F16: return convert_loop<Src, DType::F16>(src, dst, n);
    case DType::BF16: return convert_loop<Src, DType::BF16>(src, dst, n);
    case DType::F8E4M3: return convert_loop<Src, DType::F8E4M3>(src, dst, n);
    case DType::F8E5M2: return convert_loop<Src, DType::F8E5M2>(src, dst, n);
    case DType::I64: return convert_loop<Src, DType::I64>(src, dst, n);
    case DType::I32: return convert_loop<Src, DType::I32>(src, dst, n);
    case DType::I16: return convert_loop<Src, DType::I16>(src, dst, n);
    case DType::I8: return convert_loop<Src, DType::I8>(src, dst, n);
    case DType::U8: return convert_loop<Src, DType::U8>(src, dst, n);
    case DType::Bool: return convert_loop<Src, DType::Bool>(src, dst, n);
  }
  fail(ErrorCode::Internal, "dtype.cpp: unknown destination dtype {}", static_cast<int>(dst_dtype));
}

void convert_serial(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  // The hot pairs: SIMD with dynamic dispatch.
  if (src_dtype == DType::BF16 && dst_dtype == DType::F32)
    return HWY_DYNAMIC_DISPATCH(Bf16ToF32)(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  if (src_dtype == DType::F32 && dst_dtype == DType::BF16)
    return HWY_DYNAMIC_DISPATCH(F32ToBf16)(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  if (src_dtype == DType::F16 && dst_dtype == DType::F32)
    return HWY_DYNAMIC_DISPATCH(F16ToF32)(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  if (src_dtype == DType::F32 && dst_dtype == DType::F16)
    return HWY_DYNAMIC_DISPATCH(F32ToF16)(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  switch (src_dtype) {
    case DType::F64: return convert_from<DType::F64>(src, dst, dst_dtype, n);
    case DType::F32: return convert_from<DType::F32>(src, dst, dst_dtype, n);
    case DType::F16: return convert_from<DType::F16>(src, dst, dst_dtype, n);
    case DType::BF16: return convert_from<DType::BF16>(src, dst, dst_dtype, n);
    case DType::F8E4M3: return convert_from<DType::F8E4M3>(src, dst, dst_dtype, n);
    case DType::F8E5M2: return convert_from<DType::F8E5M2>(src, dst, dst_dtype, n);
    case DType::I64: return convert_from<DType::I64>(src, dst, dst_dtype, n);
    case DType::I32: return convert_from<DType::I32>(src, dst, dst_dtype, n);
    case DType::I16: return convert_from<DType::I16>(src, dst, dst_dtype, n);
    case DType::I8: return convert_from<DType::I8>(src, dst, dst_dtype, n);
    case DType::U8: return convert_from<DType::U8>(src, dst, dst_dtype, n);
    case DType::Bool: return convert_from<DType::Bool>(src, dst, dst_dtype, n);
  }
  fail(ErrorCode::Internal, "dtype.cpp: unknown source dtype {}", static_cast<int>(src_dtype));
}

// Conversions of whole checkpoints (fp8 -> bf16, f32 -> bf16 at load) are memory bound; one core
// cannot saturate a server's memory bandwidth, so big buffers are split across threads.
constexpr size_t kParallelChunk = size_t(1) << 18;  // elements

}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  if (n == 0) return;
  // Both sizes first: they reject an invalid enum value before any thread starts.
  const size_t src_size = dtype_size(src_dtype), dst_size = dtype_size(dst_dtype);
  if (src_dtype == dst_dtype) {
    std::memmove(dst, src, n * src_size);
    return;
  }
  if (n < 2 * kParallelChunk || omp_in_parallel() || num_threads() < 2)
    return convert_serial(src, src_dtype, dst, dst_dtype, n);
  const auto chunks = static_cast<int64_t>((n + kParallelChunk - 1) / kParallelChunk);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kParallelChunk;
    convert_serial(s + begin * src_size, src_dtype, d + begin * dst_size, dst_dtype,
                   std::min(kParallelChunk, n - begin));
  }
}

}  // namespace fluxrt

#endif  // HWY_ONCE
