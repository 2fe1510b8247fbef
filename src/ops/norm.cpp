#include "ops/norm.h"

#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"

namespace fluxrt::ops {

Tensor adaln_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, float eps) {
  constexpr const char* kOp = "adaln_modulate";
  detail::check_float(x, kOp, "x");
  detail::check_float(shift, kOp, "shift");
  detail::check_float(scale, kOp, "scale");
  FLUXRT_CHECK(x.dim() == 3, ErrorCode::InvalidArgument, "[adaln_modulate] x must be [B, L, D], got {}",
               x.shape().str());
  const Shape want{x.size(0), x.size(2)};
  FLUXRT_CHECK(shift.shape() == want && scale.shape() == want, ErrorCode::InvalidArgument,
               "[adaln_modulate] shift {} and scale {} must be [B, D] = {} for x {}", shift.shape().str(),
               scale.shape().str(), want.str(), x.shape().str());
  detail::check_same_device(x, shift, kOp);
  detail::check_same_device(x, scale, kOp);
  const Tensor xs = detail::rows_ready(x);
  Tensor y = detail::empty_like(xs);
  if (x.numel() == 0) return y;
  const auto& k = kernels_for(x);
  if (k.adaln_modulate) {
    k.adaln_modulate(backend::AdaLnArgs{xs, detail::rows_ready(shift), detail::rows_ready(scale), y, eps});
    return y;
  }
  note_fallback(kOp, k);
  // LN(x) + LN(x) * scale + shift, with [B, 1, D] broadcasts (reference formula, three passes).
  Tensor n = layer_norm(xs, Tensor(), Tensor(), eps);
  Tensor out = add(n, mul(n, scale.unsqueeze(1)));
  add_(out, shift.unsqueeze(1));
  return out;
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  constexpr const char* kOp = "layer_norm";
  detail::check_float(x, kOp, "x");
  FLUXRT_CHECK(x.dim() >= 1, ErrorCode::InvalidArgument, "[layer_norm] x must have a last dim, got {}", x.str());
  if (weight.defined()) detail::check_vector(weight, x.size(-1), kOp, "weight");
  if (bias.defined()) detail::check_vector(bias, x.size(-1), kOp, "bias");
  detail::check_on_device(weight, x.device(), kOp, "weight");
  detail::check_on_device(bias, x.device(), kOp, "bias");
  const Tensor xs = detail::rows_ready(x);
  Tensor y = detail::empty_like(xs);
  if (x.numel() == 0) return y;
  const auto& k = kernels_for(x);
  require_kernel(k.layer_norm, kOp, k)(backend::LayerNormArgs{xs, weight, bias, y, eps});
  return y;
}

namespace {
void run_rms_norm(const Tensor& x, const Tensor& weight, float eps, RmsRounding rounding, Tensor& y) {
  constexpr const char* kOp = "rms_norm";
  detail::check_float(x, kOp, "x");
  FLUXRT_CHECK(x.dim() >= 1, ErrorCode::InvalidArgument, "[rms_norm] x must have a last dim, got {}", x.str());
  if (weight.defined()) detail::check_vector(weight, x.size(-1), kOp, "weight");
  detail::check_on_device(weight, x.device(), kOp, "weight");
  detail::check_on_device(y, x.device(), kOp, "y");
  if (x.numel() == 0) return;
  const auto& k = kernels_for(x);
  require_kernel(k.rms_norm, kOp, k)(
      backend::RmsNormArgs{x, weight, y, eps, rounding == RmsRounding::BeforeWeight});
}
}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps, RmsRounding rounding) {
  detail::check_defined(x, "rms_norm", "x");
  const Tensor xs = detail::rows_ready(x);
  Tensor y = detail::empty_like(xs);
  run_rms_norm(xs, weight, eps, rounding, y);
  return y;
}

void rms_norm_(Tensor& x, const Tensor& weight, float eps, RmsRounding rounding) {
  detail::check_defined(x, "rms_norm_", "x");
  if (x.dim() == 0 || x.stride(-1) != 1) {
    x.copy_from(rms_norm(x, weight, eps, rounding));
    return;
  }
  run_rms_norm(x, weight, eps, rounding, x);
}

}  // namespace fluxrt::ops
