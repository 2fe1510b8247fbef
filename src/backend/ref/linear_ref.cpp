#include "backend/ref/linear_ref.h"

#include <cmath>
#include <numbers>
#include <vector>

namespace fluxrt::backend {
namespace {

// Row r of a 2-D (or 1-D when rank 1) tensor as f32 values; bf16/f16/f32 widen exactly.
void read_row(const Tensor& t, int64_t row, std::vector<float>& out) {
  const int64_t n = t.size(-1);
  out.resize(static_cast<size_t>(n));
  const auto* base = static_cast<const char*>(t.raw_data());
  const int64_t row_offset = t.dim() == 1 ? 0 : row * t.stride(0);
  const int64_t col_stride = t.stride(-1);
  const size_t es = t.element_size();
  if (col_stride == 1) {
    convert(base + row_offset * es, t.dtype(), out.data(), DType::F32, static_cast<size_t>(n));
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    convert(base + (row_offset + j * col_stride) * es, t.dtype(), &out[j], DType::F32, 1);
}

}  // namespace

double apply_activation_ref(Activation act, double v) {
  switch (act) {
    case Activation::None:
      return v;
    case Activation::GeluTanh: {
      const double c = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
    }
    case Activation::Silu:
      return v / (1.0 + std::exp(-v));
  }
  return v;
}

std::shared_ptr<PreparedLinear> prepare_linear_ref(const Tensor& weight, const Tensor& bias) {
  auto p = std::make_shared<PreparedLinear>();
  p->weight = weight;
  p->bias = bias;
  return p;
}

std::shared_ptr<PreparedLinear> prepare_linear_quantized_ref(const QuantizedMatrix& weight,
                                                             const Tensor& bias) {
  auto p = prepare_linear_ref(dequantize_ref(weight), bias);
  p->quantized = std::make_shared<QuantizedMatrix>(weight);
  return p;
}

void linear_ref(const LinearArgs& a) {
  const Tensor& x = a.x;
  const Tensor& w = a.w->weight;
  const int64_t m_rows = x.size(0), k_dim = x.size(1), n_cols = w.size(0);
  const bool has_bias = a.w->bias.defined();
  const bool gated = a.gate.defined();

  // The weight as f32 once (exact for every float dtype we accept), row-major [N, K].
  std::vector<float> wf(static_cast<size_t>(n_cols * k_dim));
  {
    std::vector<float> row;
    for (int64_t n = 0; n < n_cols; ++n) {
      read_row(w, n, row);
      std::copy(row.begin(), row.end(), wf.begin() + n * k_dim);
    }
  }
  std::vector<float> bias, gate;
  if (has_bias) read_row(a.w->bias, 0, bias);
  if (gated) read_row(a.gate, 0, gate);

  const size_t ye = a.y.element_size();
#pragma omp parallel
  {
    std::vector<float> xr, rr;
    std::vector<double> out(static_cast<size_t>(n_cols));
#pragma omp for schedule(dynamic, 4)
    for (int64_t m = 0; m < m_rows; ++m) {
      read_row(x, m, xr);
      // Read the residual before writing y: it may alias y.
      if (gated) read_row(a.residual, m, rr);
      for (int64_t n = 0; n < n_cols; ++n) {
        const float* wr = wf.data() + n * k_dim;
        double acc = 0.0;
        for (int64_t k = 0; k < k_dim; ++k) acc += static_cast<double>(xr[k]) * wr[k];
        if (has_bias) acc += bias[n];
        acc = apply_activation_ref(a.activation, acc);
        if (gated) acc = rr[n] + static_cast<double>(gate[n]) * acc;
        out[n] = acc;
      }
      char* yrow = static_cast<char*>(a.y.raw_data()) + m * a.y.stride(0) * ye;
      for (int64_t n = 0; n < n_cols; ++n)
        convert(&out[n], DType::F64, yrow + n * a.y.stride(1) * ye, a.y.dtype(), 1);
    }
  }
}

}  // namespace fluxrt::backend
