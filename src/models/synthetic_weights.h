#pragma once
// Synthetic weights of the real shapes, for benchmarks and shape tests without a checkpoint.
#include <cstdint>

#include "core/tensor.h"

namespace fluxrt::models {

// Uniform values in [center - bound, center + bound), never exactly zero, in BF16 or F32 on the
// host. The same seed gives the same values on every machine and at every thread count (one
// splitmix64 stream per fixed-size chunk), so a benchmark on 2 cores and one on 16 run the same
// model.
Tensor synthetic_tensor(const Shape& shape, DType dtype, uint64_t seed, float bound, float center = 0.0f);

}  // namespace fluxrt::models
