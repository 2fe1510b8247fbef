#pragma once
// Attention for all heads of a layer in one call, on [B, L, H, D] tensors (no transposes).
// RoPE is applied to q and k while they are read; the softmax uses the fixed Cauchy-Schwarz row
// maximum m_i = |q_i| * max_j |k_j| * scale with exp2, falling back to the exact online maximum for
// rows whose bound could underflow f32 (DESIGN.md section 2).
//
// Precision contract (what every backend promises, checked against the f64 reference):
// - q, k, v are read in their storage dtype and widened to f32; RoPE is computed in f32 from the
//   f32 cos/sin tables and the rotated q/k are NOT rounded back to the input dtype. diffusers
//   rounds rotated q/k to bf16 before SDPA; we skip that rounding because it only adds error
//   relative to the exact result (bit-matching diffusers is impossible anyway: its SDPA backend
//   chooses its own blocking), and the tolerance is measured against the f64 oracle.
// - Scores, softmax and P·V accumulate in f32; the output is rounded once to out's dtype.
// - A query row that sees no key at all (causal / padding mask) produces zeros (PyTorch gives NaN).
// - Scores must be finite in f32 (|q|·|k|·scale < ~3e38); beyond that the result is unspecified.
#include "core/tensor.h"

namespace fluxrt::backend {

enum class RopeLayout {
  None,
  AdjacentPairs,  // FLUX: pairs (x[2j], x[2j+1])
  HalfSplit,      // Qwen3 / NeoX "rotate_half": pairs (x[j], x[j + D/2])
};

struct AttentionArgs {
  Tensor q;    // [B, Lq, H, D]  f32/bf16/f16, any strides with stride(3) == 1 (e.g. a slice of a fused qkv)
  Tensor k;    // [B, Lk, Hkv, D] Hkv divides H (grouped-query attention when Hkv < H); q's dtype
  Tensor v;    // [B, Lk, Hkv, D]
  Tensor out;  // [B, Lq, H, D] preallocated, q's dtype, stride(3) == 1
  float scale = 0;  // softmax scale, usually 1/sqrt(D); T5 uses 1

  // RoPE: cos/sin tables [L, D/2] in f32 (stride(-1) == 1), row l for sequence position l (shared
  // by the batch), or [B, L, D/2] per batch element. For AdjacentPairs entry j rotates
  // (x[2j], x[2j+1]); for HalfSplit entry j rotates (x[j], x[j + D/2]):
  //   y_a = x_a cos - x_b sin,  y_b = x_b cos + x_a sin.
  // Applied to q and k only. Key j uses row j (the tables have >= Lk rows). Query i uses row i of
  // rope_q_cos/rope_q_sin when those are given, otherwise row i + (Lk - Lq) of the key tables (the
  // queries are the last Lq positions, the same convention as `causal`).
  RopeLayout rope = RopeLayout::None;
  Tensor rope_cos;
  Tensor rope_sin;
  Tensor rope_q_cos;  // optional [Lq, D/2] or [B, Lq, D/2]
  Tensor rope_q_sin;

  bool causal = false;          // query i sees keys j <= i + (Lk - Lq)
  Tensor key_padding_mask;      // [B, Lk] u8/bool: nonzero = attend, 0 = masked out; undefined = all
  Tensor bias;                  // additive f32 bias, 4-D, each dim 1 or full of [B, H, Lq, Lk] (T5); optional.
                                // Added to scale * q·k (T5: scale 1).
};

}  // namespace fluxrt::backend
