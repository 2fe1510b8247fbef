#pragma once
// Deterministic inputs for the kernel benchmarks (bench_ops, bench_ops_cost): the same values in
// both, so their per-op figures describe the same work.
#include <cstdint>

#include "core/tensor.h"

namespace fluxrt::bench {

// Uniform values in [lo, lo + 4) from a fixed LCG, made in f32 and converted to `dtype`.
inline Tensor filled(const Shape& shape, DType dtype, float lo = -2.0f) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  uint32_t s = 12345;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = lo + 4.0f * static_cast<float>(s >> 8) / static_cast<float>(1u << 24);
  }
  return t.to(dtype);
}

}  // namespace fluxrt::bench
