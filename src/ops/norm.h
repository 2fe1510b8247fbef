#pragma once
// Normalisations. Statistics are f32 (CPU) whatever the storage dtype; outputs take x's dtype.
// Weights/biases may be any float dtype.
#include "core/tensor.h"

namespace fluxrt::ops {

// FLUX AdaLN: LayerNorm_noaffine(x, eps) * (1 + scale) + shift in one pass.
// x [B, L, D]; shift, scale [B, D] (views into the modulation vector are fine).
Tensor adaln_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, float eps = 1e-6f);

// LayerNorm over the last dim; weight/bias [D] optional (pass Tensor() for none).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps);

enum class RmsRounding {
  Once,                // y = round(x * inv_rms * w): torch.nn.RMSNorm / Qwen3 (f32 compute)
  BeforeWeight,        // y = round(round(x * inv_rms) * w): T5LayerNorm, BFL QKNorm on half types
};

// RMSNorm over the last dim: x [..., D], weight [D] or undefined. Per-head QK norm is
// x [B, L, H, 128] with weight [128].
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps, RmsRounding rounding = RmsRounding::Once);
void rms_norm_(Tensor& x, const Tensor& weight, float eps, RmsRounding rounding = RmsRounding::Once);

// transformers' T5LayerNorm: RMS norm computed in f32, cast to the (half) weight dtype before the
// weight multiply.
inline Tensor t5_rms_norm(const Tensor& x, const Tensor& weight, float eps = 1e-6f) {
  return rms_norm(x, weight, eps, RmsRounding::BeforeWeight);
}

}  // namespace fluxrt::ops
