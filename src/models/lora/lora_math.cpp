#include "models/lora/lora_math.h"

#include <cfloat>
#include <cmath>

#include "core/error.h"
#include "ops/elementwise.h"
#include "ops/linear.h"

namespace fluxrt::models {
namespace {

Tensor f32(const Tensor& t) { return t.to(DType::F32).contiguous(); }

Tensor matmul(const Tensor& a, const Tensor& b) { return lora_matmul(a, b); }

// kron(x [a, b], y [c, d]) [a*c, b*d]: block (i, j) is x[i, j] * y.
Tensor kron(const Tensor& x, const Tensor& y) {
  const int64_t a = x.size(0), b = x.size(1), c = y.size(0), d = y.size(1);
  Tensor out = Tensor::empty({a * c, b * d}, DType::F32);
  const float* xp = x.data<float>();
  const float* yp = y.data<float>();
  float* op = out.data<float>();
  for (int64_t i = 0; i < a; ++i)
    for (int64_t k = 0; k < c; ++k) {
      float* row = op + (i * c + k) * (b * d);
      for (int64_t j = 0; j < b; ++j) {
        const float s = xp[i * b + j];
        for (int64_t l = 0; l < d; ++l) row[j * d + l] = s * yp[k * d + l];
      }
    }
  return out;
}

}  // namespace

// Through the prepared GEMM, which computes x @ W^T: W = b^T.
Tensor lora_matmul(const Tensor& a, const Tensor& b) {
  return ops::linear(f32(a), *ops::prepare_linear(f32(b).transpose(0, 1).contiguous())).contiguous();
}

Tensor lora_module_delta(const LoraModule& m) {
  Tensor delta;
  switch (m.kind) {
    case LoraKind::Lora:
      delta = matmul(m.up, m.down);
      break;
    case LoraKind::LoKr:
      delta = kron(m.w1.defined() ? f32(m.w1) : matmul(m.w1_a, m.w1_b),
                   m.w2.defined() ? f32(m.w2) : matmul(m.w2_a, m.w2_b));
      break;
    case LoraKind::LoHa:
      delta = ops::mul(matmul(m.w1_a, m.w1_b), matmul(m.w2_a, m.w2_b)).contiguous();
      break;
  }
  ops::scale_(delta, m.factor());
  return delta;
}

void apply_dora(const std::vector<Tensor>& weights, const std::vector<Tensor>& deltas,
                const Tensor& magnitude, bool eps, float strength) {
  FLUXRT_CHECK(!weights.empty() && weights.size() == deltas.size(), ErrorCode::Internal,
               "apply_dora: {} weight blocks, {} delta blocks", weights.size(), deltas.size());
  const int64_t cols = weights[0].size(1);
  const std::vector<float> g = magnitude.to_vector();
  const bool per_column = magnitude.dim() == 2 && magnitude.size(0) == 1;
  int64_t rows = 0;
  for (const Tensor& w : weights) rows += w.size(0);
  FLUXRT_CHECK(static_cast<int64_t>(g.size()) == (per_column ? cols : rows), ErrorCode::Internal,
               "apply_dora: magnitude {} for [{}, {}] blocks", magnitude.shape().str(), rows, cols);
  const double e = eps ? FLT_EPSILON : 0.0;
  // W + dW, all of it: a column norm needs every block before any row changes.
  std::vector<Tensor> merged;
  for (size_t i = 0; i < weights.size(); ++i) {
    FLUXRT_CHECK(weights[i].dtype() == DType::F32 && weights[i].is_contiguous() &&
                     deltas[i].shape() == weights[i].shape(),
                 ErrorCode::Internal, "apply_dora: blocks are not matching contiguous f32");
    Tensor v = deltas[i].to(DType::F32).clone();
    ops::add_(v, weights[i]);
    merged.push_back(v);
  }
  std::vector<double> col_norm;
  if (per_column) {
    col_norm.assign(cols, 0.0);
    for (const Tensor& d : merged) {
      const float* p = d.data<float>();
      for (int64_t r = 0; r < d.size(0); ++r)
        for (int64_t c = 0; c < cols; ++c) col_norm[c] += double(p[r * cols + c]) * p[r * cols + c];
    }
    for (double& n : col_norm) n = std::sqrt(n) + e;
  }
  int64_t row0 = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    float* w = weights[i].data<float>();
    const float* v = merged[i].data<float>();
    for (int64_t r = 0; r < weights[i].size(0); ++r) {
      const float* vr = v + r * cols;
      float* wr = w + r * cols;
      double row_scale = 0.0;
      if (!per_column) {
        double n = 0.0;
        for (int64_t c = 0; c < cols; ++c) n += double(vr[c]) * vr[c];
        row_scale = g[row0 + r] / (std::sqrt(n) + e);
      }
      for (int64_t c = 0; c < cols; ++c) {
        const double s = per_column ? g[c] / col_norm[c] : row_scale;
        const double dora = vr[c] * s;
        wr[c] = static_cast<float>(strength == 1.0f ? dora : wr[c] + strength * (dora - wr[c]));
      }
    }
    row0 += weights[i].size(0);
  }
}

}  // namespace fluxrt::models
