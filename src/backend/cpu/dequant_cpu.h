#pragma once
// Fast dequantization of quantized weights (core/quant.h) on the CPU: Highway SIMD, bit-identical
// to the scalar reference dequantize_row_ref / dequantize_rows_ref.
#include <cstdint>

#include "core/quant.h"

namespace fluxrt::backend::cpu {

// n values (a multiple of the type's block) from src into dst.
void dequantize_row_cpu(QuantType type, const uint8_t* src, float* dst, int64_t n);
// Rows [r0, r0 + count) of q, scaled, into dst (row stride ld floats).
void dequantize_rows_cpu(const QuantizedMatrix& q, int64_t r0, int64_t count, float* dst, int64_t ld);
// Columns [k0, k0 + n) of row r of q, scaled, into dst; k0 and n are multiples of the type's block
// (blocks run along the row, so a column range of whole blocks is a byte range).
void dequantize_row_part_cpu(const QuantizedMatrix& q, int64_t r, int64_t k0, int64_t n, float* dst);

}  // namespace fluxrt::backend::cpu
