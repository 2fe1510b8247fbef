#pragma once
// Argument structs for the normalisation kernels. Statistics are always accumulated in f32 (ref:
// f64) whatever the storage dtype. Stride contract as in elementwise.h: last dim stride 1, leading
// dims any strides.
#include "core/tensor.h"

namespace fluxrt::backend {

// AdaLN modulation in one pass: y = LayerNorm_noaffine(x, eps) * (1 + scale) + shift, evaluated
// per row as x * a + b with a = inv_std * (1 + scale), b = shift - mean * a. scale and shift are
// per batch element and never materialised per token.
struct AdaLnArgs {
  Tensor x;      // [B, L, D]
  Tensor shift;  // [B, D], stride(1) == 1, stride(0) any (chunks of the modulation vector)
  Tensor scale;  // [B, D], same contract
  Tensor y;      // [B, L, D]
  float eps = 1e-6f;
};

// LayerNorm over the last dim with optional affine weight/bias (CLIP uses eps 1e-5 with both).
struct LayerNormArgs {
  Tensor x;       // [..., D]
  Tensor weight;  // [D] or undefined
  Tensor bias;    // [D] or undefined
  Tensor y;       // same shape as x
  float eps = 1e-5f;
};

// RMSNorm over the last dim: y = x / sqrt(mean(x^2) + eps) * weight. With x [B, L, H, 128] and
// weight [128] this is FLUX's per-head QK norm; with x [B, L, D] and weight [D] the row norm of
// T5 and Qwen3.
struct RmsNormArgs {
  Tensor x;       // [..., D]
  Tensor weight;  // [D] (any float dtype) or undefined (= ones)
  Tensor y;       // same shape as x; may be x itself
  float eps = 1e-6f;
  // Round the normalised value x * inv_rms to y's dtype before multiplying by the weight (and round
  // again after). This is what transformers' T5LayerNorm (cast to the half weight dtype, then
  // weight * h) and BFL's QKNorm (rrms then .to(x_dtype) * scale) do. false: one rounding at the end
  // (torch.nn.RMSNorm / Qwen3RMSNorm in f32 then cast, which is the same value for f32 storage).
  bool round_before_weight = false;
};

}  // namespace fluxrt::backend
