#pragma once
// Seeded test inputs. Values are drawn in f64 and rounded to the requested dtype when the tensor
// is built, so a kernel and the oracle always see the same (already rounded) numbers.
#include <cstdint>

#include "core/tensor.h"

namespace fluxrt::test {

// Uniform in [lo, hi).
Tensor random_uniform(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);
// Normal(mean, stddev).
Tensor random_normal(const Shape& shape, DType dtype, uint64_t seed, double mean = 0.0, double stddev = 1.0);
// Integers uniform in [0, n) as i32 or i64.
Tensor random_ids(const Shape& shape, DType dtype, uint64_t seed, int64_t n);

// A view of `shape` whose leading dims are NOT contiguous (rows padded by `pad` elements and the
// first two dims stored swapped when rank >= 3) but whose last dim has stride 1; filled like
// random_normal. Exercises the kernels' "leading dims any strides" contract.
Tensor random_strided(const Shape& shape, DType dtype, uint64_t seed, int64_t pad = 3);

}  // namespace fluxrt::test
