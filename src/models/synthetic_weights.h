#pragma once
// Synthetic weights of the real shapes, for benchmarks and shape tests without a checkpoint.
#include <cstdint>

#include "core/quant.h"
#include "core/tensor.h"

namespace fluxrt::models {

// Uniform values in [center - bound, center + bound), never exactly zero, in BF16 or F32 on the
// host. The same seed gives the same values on every machine and at every thread count (one
// splitmix64 stream per fixed-size chunk), so a benchmark on 2 cores and one on 16 run the same
// model.
Tensor synthetic_tensor(const Shape& shape, DType dtype, uint64_t seed, float bound, float center = 0.0f);

// A [rows, cols] weight of `type` for benchmarks: synthetic_tensor's values quantized
// (quantize_row_ref) for the types we write; fp8 converted; for the K types, whose quantizer we
// do not have, random block bits with scales that keep the values within about `bound` (the same
// bytes, memory and arithmetic as a real file's).
QuantizedMatrix synthetic_quantized(int64_t rows, int64_t cols, QuantType type, uint64_t seed, float bound);

}  // namespace fluxrt::models
