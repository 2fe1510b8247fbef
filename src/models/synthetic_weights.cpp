#include "models/synthetic_weights.h"

#include <algorithm>

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

}  // namespace fluxrt::models
