#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace fluxrt {
namespace {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

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
  fail(ErrorCode::Internal, "unknown dtype {}", static_cast<int>(dtype));
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

// ---- f16 (IEEE binary16), the algorithm PyTorch's c10::Half uses.

float f16_to_f32(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = bits_float((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = bits_float((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? float_bits(denormalized) : float_bits(normalized));
  return bits_float(result);
}

uint16_t f32_to_f16(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = float_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = bits_float((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = float_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// ---- bf16

float bf16_to_f32(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

uint16_t f32_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t u = float_bits(f);
  uint32_t rounding_bias = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

// ---- float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN, max 448.

float f8e4m3_to_f32(uint8_t v) {
  const uint32_t sign = (v & 0x80u) ? 0x80000000u : 0u;
  const uint32_t exp = (v >> 3) & 0xFu;
  const uint32_t mant = v & 0x7u;
  if (exp == 0xF && mant == 0x7) return bits_float(sign | 0x7FC00000u);
  float mag;
  if (exp == 0)
    mag = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant * 2^-6 / 8
  else
    mag = bits_float(((exp + 127 - 7) << 23) | (mant << 20));
  return sign ? -mag : mag;
}

uint8_t f32_to_f8e4m3(float f) {
  const uint32_t fp8_max = 1087u << 20;  // 480: everything at or above rounds past 448 -> NaN
  const uint32_t denorm_mask = 141u << 23;
  uint32_t f_bits = float_bits(f);
  const uint32_t sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  uint8_t result;
  if (f_bits >= fp8_max) {
    result = 0x7F;
  } else if (f_bits < (121u << 23)) {
    float g = bits_float(f_bits) + bits_float(denorm_mask);
    result = static_cast<uint8_t>(float_bits(g) - denorm_mask);
  } else {
    uint32_t mant_odd = (f_bits >> 20) & 1u;
    f_bits += ((uint32_t)(7 - 127) << 23) + 0x7FFFFu;
    f_bits += mant_odd;
    result = static_cast<uint8_t>(f_bits >> 20);
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}

// ---- float8_e5m2: bias 15, IEEE-like with Inf and NaN.

float f8e5m2_to_f32(uint8_t v) { return f16_to_f32(static_cast<uint16_t>(v) << 8); }

uint8_t f32_to_f8e5m2(float f) {
  const uint32_t fp32_inf = 255u << 23;
  const uint32_t fp8_max = 143u << 23;
  const uint32_t denorm_mask = 134u << 23;
  uint32_t f_bits = float_bits(f);
  const uint32_t sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  uint8_t result;
  if (f_bits >= fp8_max) {
    result = f_bits > fp32_inf ? 0x7F : 0x7C;
  } else if (f_bits < (113u << 23)) {
    float g = bits_float(f_bits) + bits_float(denorm_mask);
    result = static_cast<uint8_t>(float_bits(g) - denorm_mask);
  } else {
    uint32_t mant_odd = (f_bits >> 21) & 1u;
    f_bits += ((uint32_t)(15 - 127) << 23) + 0xFFFFFu;
    f_bits += mant_odd;
    result = static_cast<uint8_t>(f_bits >> 21);
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}

// ---- bulk conversion

namespace {

// Reads element i of src as double (exact for every supported type except i64 beyond 2^53).
inline double load(const void* src, DType t, size_t i) {
  switch (t) {
    case DType::F64: return static_cast<const double*>(src)[i];
    case DType::F32: return static_cast<const float*>(src)[i];
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(src)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
    case DType::F8E4M3: return f8e4m3_to_f32(static_cast<const uint8_t*>(src)[i]);
    case DType::F8E5M2: return f8e5m2_to_f32(static_cast<const uint8_t*>(src)[i]);
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(src)[i]);
    case DType::I32: return static_cast<const int32_t*>(src)[i];
    case DType::I16: return static_cast<const int16_t*>(src)[i];
    case DType::I8: return static_cast<const int8_t*>(src)[i];
    case DType::U8: return static_cast<const uint8_t*>(src)[i];
    case DType::Bool: return static_cast<const uint8_t*>(src)[i] ? 1.0 : 0.0;
  }
  return 0;
}

template <typename I>
inline I to_int(double v) {
  if (std::isnan(v)) return 0;
  double t = std::trunc(v);
  if (t <= static_cast<double>(std::numeric_limits<I>::lowest())) return std::numeric_limits<I>::lowest();
  if (t >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(t);
}

// Float targets from a double go through f32 first only when the double is itself an f32 value;
// narrowing f64 -> f16 directly would double-round otherwise, so f64 sources use a correctly
// rounded path via f32 only when exact.
inline void store(void* dst, DType t, size_t i, double v) {
  switch (t) {
    case DType::F64: static_cast<double*>(dst)[i] = v; return;
    case DType::F32: static_cast<float*>(dst)[i] = static_cast<float>(v); return;
    case DType::F16: static_cast<uint16_t*>(dst)[i] = f32_to_f16(static_cast<float>(v)); return;
    case DType::BF16: static_cast<uint16_t*>(dst)[i] = f32_to_bf16(static_cast<float>(v)); return;
    case DType::F8E4M3: static_cast<uint8_t*>(dst)[i] = f32_to_f8e4m3(static_cast<float>(v)); return;
    case DType::F8E5M2: static_cast<uint8_t*>(dst)[i] = f32_to_f8e5m2(static_cast<float>(v)); return;
    case DType::I64: static_cast<int64_t*>(dst)[i] = to_int<int64_t>(v); return;
    case DType::I32: static_cast<int32_t*>(dst)[i] = to_int<int32_t>(v); return;
    case DType::I16: static_cast<int16_t*>(dst)[i] = to_int<int16_t>(v); return;
    case DType::I8: static_cast<int8_t*>(dst)[i] = to_int<int8_t>(v); return;
    case DType::U8: static_cast<uint8_t*>(dst)[i] = to_int<uint8_t>(v); return;
    case DType::Bool: static_cast<uint8_t*>(dst)[i] = v != 0.0; return;
  }
}

}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  if (src_dtype == dst_dtype) {
    std::memmove(dst, src, n * dtype_size(src_dtype));
    return;
  }
  // The hot pairs get straight loops; everything else goes through double.
  if (src_dtype == DType::BF16 && dst_dtype == DType::F32) {
    auto* s = static_cast<const uint16_t*>(src);
    auto* d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
    return;
  }
  if (src_dtype == DType::F32 && dst_dtype == DType::BF16) {
    auto* s = static_cast<const float*>(src);
    auto* d = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
    return;
  }
  if (src_dtype == DType::F16 && dst_dtype == DType::F32) {
    auto* s = static_cast<const uint16_t*>(src);
    auto* d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = f16_to_f32(s[i]);
    return;
  }
  if (src_dtype == DType::F32 && dst_dtype == DType::F16) {
    auto* s = static_cast<const float*>(src);
    auto* d = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(s[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) store(dst, dst_dtype, i, load(src, src_dtype, i));
}

}  // namespace fluxrt
