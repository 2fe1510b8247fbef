// Reference element-wise kernels: f64 arithmetic, one rounding per output element.
#include <cmath>
#include <vector>

#include "backend/ref/ref_access.h"
#include "backend/ref/ref_ops.h"

namespace fluxrt::backend::ref {
namespace {

double silu(double x) { return x / (1.0 + std::exp(-x)); }
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double quick_gelu(double x) { return x / (1.0 + std::exp(-1.702 * x)); }

}  // namespace

void unary(const UnaryArgs& a) {
  RowAccess x(a.x), y(a.y);
  const int64_t rows = rows_of(a.x), cols = cols_of(a.x);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double v = x.get(r, c);
      double out = 0;
      switch (a.op) {
        case UnaryOp::Silu: out = silu(v); break;
        case UnaryOp::GeluTanh: out = gelu_tanh(v); break;
        case UnaryOp::QuickGelu: out = quick_gelu(v); break;
        case UnaryOp::Scale: out = static_cast<double>(a.alpha) * v; break;
      }
      y.set(r, c, out);
    }
}

void binary(const BinaryArgs& a) {
  RowAccess x(a.a), w(a.b), y(a.y);
  const int64_t rows = rows_of(a.a), cols = cols_of(a.a);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double p = x.get(r, c), q = w.get(r, c);
      y.set(r, c, a.op == BinaryOp::Add ? p + q : p * q);
    }
}

void glu(const GluArgs& a) {
  RowAccess g(a.gate), u(a.up), y(a.y);
  const int64_t rows = rows_of(a.gate), cols = cols_of(a.gate);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double gv = g.get(r, c);
      const double act = a.act == GluActivation::Silu ? silu(gv) : gelu_tanh(gv);
      y.set(r, c, act * u.get(r, c));
    }
}

void gated_residual(const GatedResidualArgs& a) {
  const int64_t B = a.x.size(0), L = a.x.size(1), D = a.x.size(2);
  RowAccess x(a.x), y(a.y), g(a.gate), out(a.out);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) {
      const int64_t r = b * L + l;
      for (int64_t d = 0; d < D; ++d) out.set(r, d, x.get(r, d) + g.get(b, d) * y.get(r, d));
    }
}

void softmax(const SoftmaxArgs& a) {
  RowAccess x(a.x), y(a.y);
  const int64_t rows = rows_of(a.x), cols = cols_of(a.x);
  std::vector<double> e(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, x.get(r, c));
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += e[c] = std::exp(x.get(r, c) - m);
    for (int64_t c = 0; c < cols; ++c) y.set(r, c, e[c] / s);
  }
}

void embedding(const EmbeddingArgs& a) {
  const int64_t n = a.ids.numel(), D = a.table.size(1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = static_cast<int64_t>(load(a.ids.raw_data(), a.ids.dtype(), i * a.ids.stride(0)));
    for (int64_t d = 0; d < D; ++d)
      store(a.out.raw_data(), a.out.dtype(), i * a.out.stride(0) + d * a.out.stride(1),
            load(a.table.raw_data(), a.table.dtype(), id * a.table.stride(0) + d * a.table.stride(1)));
  }
}

double round_to(double v, DType dtype) {
  double out = 0;
  if (dtype == DType::F64) return v;
  switch (dtype) {
    case DType::F32: {
      float f;
      store(&f, dtype, 0, v);
      return f;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t h;
      store(&h, dtype, 0, v);
      return load(&h, dtype, 0);
    }
    default: fail(ErrorCode::Unsupported, "[ref::round_to] {}", dtype_name(dtype));
  }
  return out;
}

}  // namespace fluxrt::backend::ref
