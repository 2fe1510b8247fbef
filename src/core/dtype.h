#pragma once
// Element types and their conversions. Every conversion rounds and treats NaN, Inf and subnormals
// exactly as PyTorch's CPU tensor .to() does (torch 2.x, contiguous tensors), so a tensor
// converted here is bit-identical to the reference's. tests/unit/test_dtype.cpp checks this
// against goldens dumped from torch (tests/data/dtype/README.md lists torch's quirks we follow).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace fluxrt {

enum class DType : uint8_t {
  F64,
  F32,
  F16,
  BF16,
  F8E4M3,  // float8_e4m3fn: no infinities, one NaN pattern per sign (S.1111.111)
  F8E5M2,
  I64,
  I32,
  I16,
  I8,
  U8,
  Bool,
};

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", "f8e4m3", ...
bool dtype_is_float(DType dtype);
// Parses a safetensors dtype string ("F32", "BF16", "F8_E4M3", "F8_E5M2", "I64", ...).
// Returns false for unknown strings.
bool dtype_from_safetensors(std::string_view text, DType* out);
std::string_view dtype_safetensors_name(DType dtype);

// What torch's contiguous f32/f64 -> bf16 conversion writes for every NaN (its AVX2/AVX-512
// kernels blend in all-ones; the scalar c10::BFloat16 constructor would give 0x7FC0, which torch
// uses when converting f16/fp8 -> bf16). SIMD code that narrows f32 to bf16 should use this.
inline constexpr uint16_t kBF16NaNFromF32 = 0xFFFF;
inline constexpr uint16_t kBF16NaNFromNarrow = 0x7FC0;

// ---- Scalar conversions (bit patterns in, bit patterns out). Inline: they are the tails of
// SIMD loops elsewhere. Each matches the corresponding bulk convert() bit for bit.

namespace dtype_detail {
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
}  // namespace dtype_detail

// f16 -> f32 is exact. NaNs keep sign and payload and become quiet (what F16C's vcvtph2ps does,
// which is what torch runs).
inline float f16_to_f32(uint16_t h) {
  using namespace dtype_detail;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t a = h & 0x7FFFu;
  uint32_t bits;
  if (a >= 0x7C00u) {  // Inf / NaN
    bits = 0x7F800000u | (a & 0x3FFu) << 13 | (a > 0x7C00u ? 0x00400000u : 0u);
  } else if (a >= 0x0400u) {  // normal: rebias the exponent by 127 - 15
    bits = (a << 13) + 0x38000000u;
  } else {  // zero or subnormal: a * 2^-24 is exact in f32
    bits = float_bits(static_cast<float>(a) * 0x1p-24f);
  }
  return bits_float(sign | bits);
}

// f32 -> f16, round to nearest even; overflow to Inf. NaN keeps its sign and the top 10 payload
// bits and is made quiet (F16C's vcvtps2ph, which torch runs).
inline uint16_t f32_to_f16(float value) {
  using namespace dtype_detail;
  const uint32_t u = float_bits(value);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t r;
  if (a > 0x7F800000u) {
    r = 0x7E00u | ((a >> 13) & 0x3FFu);
  } else if (a >= 0x47800000u) {  // >= 65536 (and Inf): beyond any rounding of 65504
    r = 0x7C00u;
  } else if (a >= 0x38800000u) {  // f16 normal range (>= 2^-14); 65520.. rounds up to Inf
    r = (a - 0x38000000u + 0x0FFFu + ((a >> 13) & 1u)) >> 13;
  } else {
    // Subnormal or zero: adding 0.5 puts the f16 subnormal step (2^-24) at the last mantissa
    // bit of the sum, so the FPU's round-to-nearest-even does the rounding.
    r = float_bits(bits_float(a) + 0.5f) - 0x3F000000u;
  }
  return static_cast<uint16_t>(sign | r);
}

// bf16 -> f32 is a shift (NaN payloads, signalling or not, pass through unchanged).
inline float bf16_to_f32(uint16_t bits) {
  return dtype_detail::bits_float(static_cast<uint32_t>(bits) << 16);
}

// f32 -> bf16, round to nearest even; every NaN becomes kBF16NaNFromF32 (as torch's tensor .to()).
inline uint16_t f32_to_bf16(float value) {
  const uint32_t u = dtype_detail::float_bits(value);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return kBF16NaNFromF32;
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float f8e4m3_to_f32(uint8_t bits);
// Round to nearest even; |x| > 448 and +-Inf saturate to +-448 (what torch 2.15 does; older
// c10 code made them NaN); NaN becomes S.1111.111.
uint8_t f32_to_f8e4m3(float value);
inline float f8e5m2_to_f32(uint8_t bits) { return f16_to_f32(static_cast<uint16_t>(bits << 8)); }
// Round to nearest even; overflow to Inf (no saturation, as torch); NaN becomes S.11111.11.
uint8_t f32_to_f8e5m2(float value);

// Converts n elements. Float targets round to nearest even (from f64 and integers through f32
// first, as torch does). Float -> integer truncates toward zero; out-of-range values and NaN
// give what torch gives on x86 (the 32- or 64-bit "integer indefinite" INT_MIN, wrapped to the
// narrower type; u8 goes through i64), on every CPU. Integer -> integer wraps. Any pair of dtypes
// is accepted; src and dst must not overlap unless they are the same dtype. Buffers of 512K
// elements or more are split across OpenMP threads (num_threads()) unless already inside a
// parallel region; the result does not depend on the split.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

// Small value types used where the element type is known at compile time.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

}  // namespace fluxrt
