#include "support/random_tensor.h"

#include <random>
#include <vector>

namespace fluxrt::test {
namespace {

template <typename Dist>
Tensor fill(const Shape& shape, DType dtype, uint64_t seed, Dist dist) {
  std::mt19937_64 gen(seed);
  Tensor t64 = Tensor::empty(shape, DType::F64);
  double* p = t64.data<double>();
  for (int64_t i = 0; i < t64.numel(); ++i) p[i] = dist(gen);
  return t64.to(dtype);
}

}  // namespace

Tensor random_uniform(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  return fill(shape, dtype, seed, std::uniform_real_distribution<double>(lo, hi));
}

Tensor random_normal(const Shape& shape, DType dtype, uint64_t seed, double mean, double stddev) {
  return fill(shape, dtype, seed, std::normal_distribution<double>(mean, stddev));
}

Tensor random_ids(const Shape& shape, DType dtype, uint64_t seed, int64_t n) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, n - 1);
  Tensor t = Tensor::empty(shape, DType::I64);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(gen);
  return t.to(dtype);
}

Tensor random_strided(const Shape& shape, DType dtype, uint64_t seed, int64_t pad) {
  Shape big = shape;
  if (big.size() >= 1) big[big.size() - 1] += pad;
  const bool swap = big.size() >= 3;
  if (swap) std::swap(big[0], big[1]);
  Tensor t = random_normal(big, dtype, seed);
  if (swap) t = t.transpose(0, 1);
  if (shape.size() >= 1) t = t.narrow(-1, 0, shape[shape.size() - 1]);
  return t;
}

}  // namespace fluxrt::test
