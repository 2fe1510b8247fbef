#include "models/synthetic_weights.h"

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace fluxrt::models {

Tensor synthetic_tensor(const Shape& shape, DType dtype, uint64_t seed, float bound, float center) {
  if (dtype != DType::BF16 && dtype != DType::F32)
    fail(ErrorCode::InvalidArgument, "synthetic weights: dtype {} (bf16 or f32 only)", dtype_name(dtype));
  Tensor t = Tensor::empty(shape, dtype);
  uint16_t* out16 = dtype == DType::BF16 ? t.data<uint16_t>() : nullptr;
  float* out32 = dtype == DType::F32 ? t.data<float>() : nullptr;
  const int64_t n = t.numel();
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ci = 0; ci < chunks; ++ci) {
    uint64_t s = seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(ci + 1));
    const int64_t end = std::min(n, (ci + 1) * kChunk);
    for (int64_t i = ci * kChunk; i < end; ++i) {
      s += 0x9E3779B97F4A7C15ull;  // splitmix64
      uint64_t z = s;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      float v = center + bound * (2.0f * u - 1.0f);
      if (v == 0.0f) v = bound * 0.5f;
      if (out16) out16[i] = f32_to_bf16(v);
      else out32[i] = v;
    }
  }
  return t;
}

QuantizedMatrix synthetic_quantized(int64_t rows, int64_t cols, QuantType type, uint64_t seed, float bound) {
  const QuantTraits& t = quant_traits(type);
  FLUXRT_CHECK(cols % t.block == 0, ErrorCode::InvalidArgument,
               "synthetic {} weight: {} columns are not whole blocks", t.name, cols);
  QuantizedMatrix q;
  q.type = type;
  q.rows = rows;
  q.cols = cols;
  q.bytes = Tensor::empty({static_cast<int64_t>(static_cast<size_t>(rows) * quant_row_bytes(type, cols))},
                          DType::U8);
  auto* out = q.bytes.data<uint8_t>();
  const size_t row_bytes = q.row_bytes();
  // The K types get random blocks (below) rather than their quantizer's search over random values:
  // the same bytes and arithmetic for the GEMM, and a 4B-parameter bench need not wait minutes.
  const bool quantize = quant_can_quantize(type) && t.block != 256;
  if (type == QuantType::F8E4M3 || type == QuantType::F8E5M2 || quantize) {
    const Tensor v = synthetic_tensor({rows, cols}, DType::F32, seed, bound);
    const float* src = v.data<float>();
    const DType fp8 = type == QuantType::F8E4M3 ? DType::F8E4M3 : DType::F8E5M2;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      if (quantize)
        quantize_row_ref(type, src + r * cols, out + r * row_bytes, cols);
      else
        convert(src + r * cols, DType::F32, out + r * row_bytes, fp8, static_cast<size_t>(cols));
    }
    return q;
  }
  // K types: random bits; the f16 super-block scales (d, and dmin where there is one) are set so
  // that a value stays below `bound` (6-bit sub-scales and 4- to 6-bit quants multiply them).
  const Tensor bits = synthetic_tensor({static_cast<int64_t>(q.nbytes() / 2)}, DType::BF16, seed, 1.0f);
  std::memcpy(out, bits.raw_data(), q.nbytes() / 2 * 2);
  size_t d_off = 0, dmin_off = SIZE_MAX;
  float scale = bound;
  switch (type) {
    case QuantType::Q2_K:
      d_off = 80, dmin_off = 82, scale = bound / 45;
      break;
    case QuantType::Q3_K:
      d_off = 108, scale = bound / 128;
      break;
    case QuantType::Q4_K:
      d_off = 0, dmin_off = 2, scale = bound / 945;
      break;
    case QuantType::Q5_K:
      d_off = 0, dmin_off = 2, scale = bound / 1953;
      break;
    case QuantType::Q6_K:
      d_off = 208, scale = bound / 4096;
      break;
    default:
      fail(ErrorCode::Internal, "synthetic_quantized: unhandled type {}", t.name);
  }
  const uint16_t d = f32_to_f16(scale), dmin = f32_to_f16(scale * 0.5f);
  for (size_t b = 0; b < q.nbytes() / t.block_bytes; ++b) {
    std::memcpy(out + b * t.block_bytes + d_off, &d, 2);
    if (dmin_off != SIZE_MAX) std::memcpy(out + b * t.block_bytes + dmin_off, &dmin, 2);
  }
  return q;
}

}  // namespace fluxrt::models
