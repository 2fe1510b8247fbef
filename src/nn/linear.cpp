#include "nn/linear.h"

#include "core/error.h"

namespace fluxrt::nn {

Linear Linear::prepare(const Tensor& weight, const Tensor& bias, Device device) {
  if (!weight.defined()) return Linear();
  return Linear(ops::prepare_linear(weight, bias, device));
}

Linear Linear::prepare_quantized(const QuantizedMatrix& weight, const Tensor& bias, Device device) {
  return Linear(ops::prepare_linear_quantized(weight, bias, device));
}

const ops::PreparedLinear& Linear::prepared() const {
  FLUXRT_CHECK(prepared_ != nullptr, ErrorCode::Internal, "[nn::Linear] used before its weight was bound");
  return *prepared_;
}

int64_t Linear::in_features() const { return prepared().in_features(); }
int64_t Linear::out_features() const { return prepared().out_features(); }
const Tensor& Linear::weight() const { return prepared().weight; }
const Tensor& Linear::bias() const { return prepared().bias; }

size_t Linear::parameter_bytes() const {
  if (!prepared_) return 0;
  const size_t weight_bytes =
      prepared_->quantized ? prepared_->quantized->nbytes() : prepared_->weight.nbytes();
  return weight_bytes + (prepared_->bias.defined() ? prepared_->bias.nbytes() : 0);
}

void Linear::release_source() {
  const Tensor& w = prepared().weight;
  // A stride-0 broadcast of one element: the same shape and dtype, no memory.
  prepared_->weight = Tensor::zeros({1, 1}, w.dtype(), w.device()).expand(w.shape());
}

Tensor Linear::operator()(const Tensor& x, Activation act) const { return ops::linear(x, prepared(), act); }

void Linear::forward_into(const Tensor& x, const Tensor& y, Activation act) const {
  ops::linear_into(x, prepared(), y, act);
}

void Linear::gated_residual_into(const Tensor& x, const Tensor& gate, const Tensor& residual, const Tensor& y,
                                 Activation act) const {
  ops::linear_gated_residual_into(x, prepared(), gate, residual, y, act);
}

void Linear::add_gated_residual(const Tensor& h, const Tensor& gate, Tensor& x) const {
  const ops::PreparedLinear& w = prepared();
  for (int64_t b = 0; b < x.size(0); ++b) {
    Tensor xb = x.select(0, b);  // [L, out]
    ops::linear_gated_residual_into(h.select(0, b), w, gate.select(0, b), xb, xb);
  }
}

}  // namespace fluxrt::nn
