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

Tensor Mlp::operator()(const Tensor& x) const { return out(hidden(x)); }

}  // namespace fluxrt::nn
