#pragma once
// Block-quantized weight formats (GGML's, as GGUF files store them) and fp8, kept in their bytes.
//
// A quantized matrix is `rows` rows of `cols` values; each row is cols / block blocks of
// block_bytes bytes (GGML's layout: blocks run along the row, i.e. along a linear's input
// features). dequantize_row_ref is the scalar reference every faster dequantization is checked
// against; it computes exactly what the `gguf` Python package's numpy dequantize computes (the
// same f32 operations in the same order, no fused multiply-add), so results are bit-identical
// (tests/unit/test_quant.cpp against tools/reference/dump_gguf_quants.py).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/tensor.h"

namespace fluxrt {

enum class QuantType : uint8_t {
  F32,
  F16,
  BF16,
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q2_K,
  Q3_K,
  Q4_K,
  Q5_K,
  Q6_K,
  F8E4M3,  // fp8 weights of safetensors checkpoints (not a GGML type), with an optional f32 scale
  F8E5M2,
};

struct QuantTraits {
  std::string_view name;  // GGML's spelling: "Q4_K", "F16", ...; "F8_E4M3" for fp8
  int64_t block = 1;      // values per block
  size_t block_bytes = 0;
  int32_t ggml_id = -1;  // GGUF's tensor type id, -1 for the fp8 types
};

const QuantTraits& quant_traits(QuantType type);
inline std::string_view quant_name(QuantType type) { return quant_traits(type).name; }
// True for the types whose bytes are blocks of more than one value (Q*).
inline bool quant_is_blocked(QuantType type) { return quant_traits(type).block > 1; }

// GGUF's tensor type id -> our type; false when this engine does not compute with it.
bool quant_type_from_ggml(uint32_t ggml_id, QuantType* out);
// GGML's name of any tensor type id it ever defined ("IQ2_XXS", "Q8_1", ...), or "" if unknown:
// so an unsupported type can be refused by name.
std::string_view ggml_type_name(uint32_t ggml_id);
// Parses "q8_0", "Q4_K", "f16", ... (case-insensitive) into a GGUF type; false when unknown.
bool quant_type_from_name(std::string_view name, QuantType* out);

// Bytes of one row of `cols` values; cols must be a multiple of the block (checked by callers).
inline size_t quant_row_bytes(QuantType type, int64_t cols) {
  const QuantTraits& t = quant_traits(type);
  return static_cast<size_t>(cols / t.block) * t.block_bytes;
}

// One row: n values (a multiple of the block) from n / block blocks at src into dst (f32).
void dequantize_row_ref(QuantType type, const uint8_t* src, float* dst, int64_t n);

// Whether quantize_row_ref can write `type`: every GGUF type here (F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1 and the K types Q2_K..Q6_K), not fp8.
bool quant_can_quantize(QuantType type);
// One row of n values (a multiple of the block, else InvalidArgument) into n / block blocks.
// F32..Q5_1 exactly as the `gguf` package's numpy quantize does (same f32 operations and order,
// its rounding, f16 scales rounded to nearest even); the K types exactly as ggml's reference
// quantizers quantize_row_q*_K_ref (no importance matrix; quant_kquants.cpp). Unsupported for
// the other types.
void quantize_row_ref(QuantType type, const float* src, uint8_t* dst, int64_t n);

// One 256-value super-block each (quant_kquants.cpp); callers use quantize_row_ref.
namespace quant_detail {
void quantize_block_q2_k(const float* x, uint8_t* block);
void quantize_block_q3_k(const float* x, uint8_t* block);
void quantize_block_q4_k(const float* x, uint8_t* block);
void quantize_block_q5_k(const float* x, uint8_t* block);
void quantize_block_q6_k(const float* x, uint8_t* block);
}  // namespace quant_detail

// A dequantized value times its row's scale, rounded once to bf16: the scaled-fp8 rule
// bf16(f32(w8) * scale) that the checkpoints' references (and the loaders before weights stayed
// fp8) use, so an fp8 model computes what its bf16 dequantization would.
inline float scaled_weight(float value, float scale) { return bf16_to_f32(f32_to_bf16(value * scale)); }

// A [rows, cols] weight in its stored bytes. `bytes` is a contiguous U8 tensor of
// rows * quant_row_bytes(cols) bytes (often a view into a file mapping; it keeps it alive).
// `scale` (f32, 1 or `rows` values, or undefined) multiplies each row after dequantization: the
// per-tensor or per-row scale of scaled-fp8 checkpoints (scaled_weight: rounded to bf16).
struct QuantizedMatrix {
  QuantType type = QuantType::F32;
  int64_t rows = 0, cols = 0;
  Tensor bytes;
  Tensor scale;
  size_t row_bytes() const { return quant_row_bytes(type, cols); }
  size_t nbytes() const { return static_cast<size_t>(rows) * row_bytes(); }
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(bytes.raw_data()) + static_cast<size_t>(r) * row_bytes();
  }
  // The f32 factor of row r (1 without a scale).
  float row_scale(int64_t r) const;
};

// Checks the shape, block divisibility, byte count and scale of `q`; InvalidArgument naming
// `what` (the tensor) otherwise.
void validate_quantized(const QuantizedMatrix& q, std::string_view what);

// Rows [r0, r0 + count) dequantized (and scaled) into dst (count x cols f32, row stride ld), by
// the scalar reference.
void dequantize_rows_ref(const QuantizedMatrix& q, int64_t r0, int64_t count, float* dst, int64_t ld);
// The whole matrix as a new f32 [rows, cols] tensor (reference; for oracles and uploads).
Tensor dequantize_ref(const QuantizedMatrix& q);

}  // namespace fluxrt
