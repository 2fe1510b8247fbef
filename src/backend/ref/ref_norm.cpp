// Reference normalisation kernels: statistics in f64 over the exact stored inputs.
#include <cmath>

#include "backend/ref/ref_access.h"
#include "backend/ref/ref_ops.h"

namespace fluxrt::backend::ref {
namespace {

// Mean and biased variance (what LayerNorm uses) of row r.
void moments(const RowAccess& x, int64_t r, int64_t cols, double* mean, double* var) {
  double s = 0;
  for (int64_t c = 0; c < cols; ++c) s += x.get(r, c);
  const double m = s / static_cast<double>(cols);
  double v = 0;
  for (int64_t c = 0; c < cols; ++c) {
    const double d = x.get(r, c) - m;
    v += d * d;
  }
  *mean = m;
  *var = v / static_cast<double>(cols);
}

double vec_at(const Tensor& t, int64_t i) { return load(t.raw_data(), t.dtype(), i * t.stride(-1)); }

}  // namespace

void adaln_modulate(const AdaLnArgs& a) {
  const int64_t B = a.x.size(0), L = a.x.size(1), D = a.x.size(2);
  RowAccess x(a.x), y(a.y);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) {
      const int64_t r = b * L + l;
      double mean, var;
      moments(x, r, D, &mean, &var);
      const double inv = 1.0 / std::sqrt(var + static_cast<double>(a.eps));
      for (int64_t d = 0; d < D; ++d) {
        const double sc = load(a.scale.raw_data(), a.scale.dtype(), b * a.scale.stride(0) + d * a.scale.stride(1));
        const double sh = load(a.shift.raw_data(), a.shift.dtype(), b * a.shift.stride(0) + d * a.shift.stride(1));
        y.set(r, d, (x.get(r, d) - mean) * inv * (1.0 + sc) + sh);
      }
    }
}

void layer_norm(const LayerNormArgs& a) {
  RowAccess x(a.x), y(a.y);
  const int64_t rows = rows_of(a.x), D = cols_of(a.x);
  for (int64_t r = 0; r < rows; ++r) {
    double mean, var;
    moments(x, r, D, &mean, &var);
    const double inv = 1.0 / std::sqrt(var + static_cast<double>(a.eps));
    for (int64_t d = 0; d < D; ++d) {
      double v = (x.get(r, d) - mean) * inv;
      if (a.weight.defined()) v *= vec_at(a.weight, d);
      if (a.bias.defined()) v += vec_at(a.bias, d);
      y.set(r, d, v);
    }
  }
}

void rms_norm(const RmsNormArgs& a) {
  RowAccess x(a.x), y(a.y);
  const int64_t rows = rows_of(a.x), D = cols_of(a.x);
  const DType out = a.y.dtype();
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) {
      const double v = x.get(r, d);
      ss += v * v;
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(D) + static_cast<double>(a.eps));
    for (int64_t d = 0; d < D; ++d) {
      double v = x.get(r, d) * inv;
      if (a.round_before_weight) v = round_to(v, out);
      if (a.weight.defined()) v *= vec_at(a.weight, d);
      y.set(r, d, v);
    }
  }
}

}  // namespace fluxrt::backend::ref
