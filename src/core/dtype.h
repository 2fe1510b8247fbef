#pragma once
// Element types and their conversions. Every conversion rounds and treats NaN, Inf and subnormals
// exactly as PyTorch does, so a tensor converted here is bit-identical to the reference's.
#include <cstddef>
#include <cstdint>
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

// Scalar conversions (bit patterns in, bit patterns out).
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);
float f8e4m3_to_f32(uint8_t bits);
uint8_t f32_to_f8e4m3(float value);
float f8e5m2_to_f32(uint8_t bits);
uint8_t f32_to_f8e5m2(float value);

// Converts n elements. Float targets round to nearest even; integer targets truncate toward zero
// as PyTorch's .to() does. Any pair of dtypes is accepted.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

// Small value types used where the element type is known at compile time.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

}  // namespace fluxrt
