#include "nn/linear.h"

#include "core/error.h"
#include "ops/elementwise.h"

namespace fluxrt::nn {

Linear::Linear(std::shared_ptr<ops::PreparedLinear> prepared)
    : prepared_(std::move(prepared)), attached_(std::make_shared<Attached>()) {}

Linear Linear::prepare(const Tensor& weight, const Tensor& bias, Device device) {
  if (!weight.defined()) return Linear();
  return Linear(ops::prepare_linear(weight, bias, device));
}

Linear Linear::prepare_quantized(const QuantizedMatrix& weight, const Tensor& bias, Device device) {
  return Linear(ops::prepare_linear_quantized(weight, bias, device));
}

const ops::PreparedLinear& Linear::prepared() const {
  FLUXRT_CHECK(prepared_ != nullptr, ErrorCode::Internal, "[nn::Linear] used before its weight was bound");
  return attached_->replacement ? *attached_->replacement : *prepared_;
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

void Linear::attach_low_rank(Linear down, Linear up) {
  FLUXRT_CHECK(down.bound() && up.bound() && down.in_features() == in_features() &&
                   up.out_features() == out_features() && up.in_features() == down.out_features(),
               ErrorCode::InvalidArgument,
               "[nn::Linear] low-rank branch [{}, {}] x [{}, {}] does not fit a [{}, {}] layer",
               up.bound() ? up.out_features() : 0, up.bound() ? up.in_features() : 0,
               down.bound() ? down.out_features() : 0, down.bound() ? down.in_features() : 0, out_features(),
               in_features());
  attached_->branches.push_back({std::move(down), std::move(up)});
}

void Linear::detach_low_rank() {
  if (attached_) attached_->branches.clear();
}

size_t Linear::low_rank_branches() const { return attached_ ? attached_->branches.size() : 0; }

void Linear::attach_replacement(Linear replacement) {
  FLUXRT_CHECK(bound() && replacement.bound() && replacement.in_features() == in_features() &&
                   replacement.out_features() == out_features() && !replaced(),
               ErrorCode::InvalidArgument,
               "[nn::Linear] a replacement weight must fit an unreplaced [{}, {}] layer",
               bound() ? out_features() : 0, bound() ? in_features() : 0);
  attached_->replacement = replacement.prepared_;
}

void Linear::detach_replacement() {
  if (attached_) attached_->replacement.reset();
}

bool Linear::replaced() const { return attached_ && attached_->replacement != nullptr; }

Tensor Linear::with_branches(const Tensor& x, Activation act) const {
  Tensor y = ops::linear(x, prepared());  // [..., out]
  for (const LowRank& b : attached_->branches)
    ops::add_(y, ops::linear(ops::linear(x, b.down.prepared()), b.up.prepared()));
  switch (act) {
    case Activation::None:
      return y;
    case Activation::GeluTanh:
      return ops::gelu_tanh(y);
    case Activation::Silu:
      return ops::silu(y);
  }
  return y;
}

Tensor Linear::operator()(const Tensor& x, Activation act) const {
  if (low_rank_branches() != 0) return with_branches(x, act);
  return ops::linear(x, prepared(), act);
}

void Linear::forward_into(const Tensor& x, const Tensor& y, Activation act) const {
  if (low_rank_branches() != 0) {
    Tensor out = y;
    out.copy_from(with_branches(x, act));
    return;
  }
  ops::linear_into(x, prepared(), y, act);
}

void Linear::gated_residual_into(const Tensor& x, const Tensor& gate, const Tensor& residual, const Tensor& y,
                                 Activation act) const {
  if (low_rank_branches() != 0) {
    // y = residual + gate[out] * act(...), gate broadcast over the rows.
    const Tensor update = ops::mul(with_branches(x, act), gate);
    if (residual.storage() != y.storage() || residual.offset() != y.offset() ||
        residual.strides() != y.strides()) {
      Tensor out = y;
      out.copy_from(residual);
    }
    Tensor out = y;
    ops::add_(out, update);
    return;
  }
  ops::linear_gated_residual_into(x, prepared(), gate, residual, y, act);
}

void Linear::add_gated_residual(const Tensor& h, const Tensor& gate, Tensor& x) const {
  if (low_rank_branches() != 0) {
    ops::gated_residual_(x, gate, with_branches(h, Activation::None));  // x += gate * this(h)
    return;
  }
  const ops::PreparedLinear& w = prepared();
  for (int64_t b = 0; b < x.size(0); ++b) {
    Tensor xb = x.select(0, b);  // [L, out]
    ops::linear_gated_residual_into(h.select(0, b), w, gate.select(0, b), xb, xb);
  }
}

}  // namespace fluxrt::nn
