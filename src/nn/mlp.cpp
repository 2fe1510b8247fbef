#include "nn/mlp.h"

#include "core/error.h"
#include "ops/elementwise.h"

namespace fluxrt::nn {

Tensor Mlp::activate(const Tensor& pre) const {
  const int last = pre.dim() - 1;
  auto first_half = [&] { return pre.narrow(last, 0, pre.size(last) / 2); };                    // a [..., M]
  auto second_half = [&] { return pre.narrow(last, pre.size(last) / 2, pre.size(last) / 2); };  // b [..., M]
  switch (kind) {
    case MlpKind::GeluTanh:
      return ops::gelu_tanh(pre);
    case MlpKind::QuickGelu:
      return ops::quick_gelu(pre);
    case MlpKind::SwiGlu:
      return ops::swiglu(pre);
    case MlpKind::GatedGeluTanh:
      return ops::gated_gelu(first_half(), second_half());
  }
  fail(ErrorCode::Internal, "[mlp] unknown kind {}", static_cast<int>(kind));
}

Tensor Mlp::hidden(const Tensor& x) const {
  switch (kind) {
    case MlpKind::GeluTanh:
      return in(x, Activation::GeluTanh);  // [..., M]
    case MlpKind::QuickGelu:
      return ops::quick_gelu(in(x));  // [..., M]
    case MlpKind::SwiGlu:
      if (up) return ops::silu_mul(in(x), up(x));  // [..., M]
      return ops::swiglu(in(x));                   // [..., 2M] -> [..., M]
    case MlpKind::GatedGeluTanh:
      if (up) return ops::gated_gelu(in(x), up(x));  // [..., M]
      return activate(in(x));                        // [..., 2M] -> [..., M]
  }
  fail(ErrorCode::Internal, "[mlp] unknown kind {}", static_cast<int>(kind));
}

void Mlp::activate_into(const Tensor& pre, const Tensor& y) const {
  const int last = pre.dim() - 1;
  const int64_t m = pre.size(last) / 2;
  switch (kind) {
    case MlpKind::SwiGlu:
      ops::swiglu_into(pre, y);
      return;
    case MlpKind::GatedGeluTanh:
      ops::gated_gelu_into(pre.narrow(last, 0, m), pre.narrow(last, m, m), y);
      return;
    case MlpKind::GeluTanh:
    case MlpKind::QuickGelu:
      break;
  }
  Tensor dst = y;
  dst.copy_from(activate(pre));  // the plain kinds have no fused form
}

void Mlp::hidden_into(const Tensor& x, const Tensor& y) const {
  switch (kind) {
    case MlpKind::GeluTanh:
      in.forward_into(x, y, Activation::GeluTanh);
      return;
    case MlpKind::SwiGlu:
      if (up) {
        ops::silu_mul_into(in(x), up(x), y);
        return;
      }
      break;
    case MlpKind::GatedGeluTanh:
      if (up) {
        ops::gated_gelu_into(in(x), up(x), y);
        return;
      }
      break;
    case MlpKind::QuickGelu: {
      Tensor dst = y;
      dst.copy_from(hidden(x));
      return;
    }
  }
  activate_into(in(x), y);  // one fused [..., 2M] projection
}

Tensor Mlp::operator()(const Tensor& x) const { return out(hidden(x)); }

}  // namespace fluxrt::nn
