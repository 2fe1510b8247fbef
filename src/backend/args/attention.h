#pragma once
// Attention for all heads of a layer in one call, on [B, L, H, D] tensors (no transposes).
// RoPE is applied to q and k while they are read; the softmax uses the fixed Cauchy-Schwarz row
// maximum m_i = |q_i| * max_j |k_j| * scale with exp2, falling back to the exact online maximum for
// rows whose bound could underflow f32 (DESIGN.md section 2).
#include "core/tensor.h"

namespace fluxrt::backend {

enum class RopeLayout {
  None,
  AdjacentPairs,  // FLUX: pairs (x[2j], x[2j+1])
  HalfSplit,      // Qwen3 / NeoX "rotate_half": pairs (x[j], x[j + D/2])
};

struct AttentionArgs {
  Tensor q;    // [B, Lq, H, D]  any strides with stride(3) == 1 (e.g. a slice of a fused qkv)
  Tensor k;    // [B, Lk, Hkv, D] Hkv divides H (grouped-query attention when Hkv < H)
  Tensor v;    // [B, Lk, Hkv, D]
  Tensor out;  // [B, Lq, H, D] preallocated
  float scale = 0;  // softmax scale, usually 1/sqrt(D); T5 uses 1

  // RoPE: cos/sin tables [L, D/2] in f32, row l for sequence position l (shared by the batch), or
  // [B, L, D/2] per batch element. For AdjacentPairs entry j rotates (x[2j], x[2j+1]); for
  // HalfSplit entry j rotates (x[j], x[j + D/2]). Applied to q and k only.
  RopeLayout rope = RopeLayout::None;
  Tensor rope_cos;
  Tensor rope_sin;

  bool causal = false;          // query i sees keys j <= i (+ Lk - Lq offset)
  Tensor key_padding_mask;      // [B, Lk] u8/bool: 1 = attend, 0 = masked out; undefined = all
  Tensor bias;                  // additive f32 bias broadcastable to [B, H, Lq, Lk] (T5); optional
};

}  // namespace fluxrt::backend
