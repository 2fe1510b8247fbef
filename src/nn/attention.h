#pragma once
// Multi-head self-attention with per-head RMSNorm on q and k (QK norm), as FLUX.1, FLUX.2 and
// Qwen3 use it: q, k, v projections, [B, L, H*d] seen as heads [B, L, H, d], RMSNorm over d on q
// and k, then the fused ops::attention, which also applies RoPE while reading q and k (the
// options say which layout and tables) and takes the masks.
#include <cstdint>

#include "core/tensor.h"
#include "nn/linear.h"
#include "ops/attention.h"
#include "ops/norm.h"

namespace fluxrt::nn {

/// t [B, L, H*d] as [B, L, H, d]: a view when the last dim is contiguous, strided rows (a column
/// slice of a fused projection) included; a copy otherwise.
Tensor split_heads(const Tensor& t, int64_t heads, int64_t head_dim);

/// Per-head RMSNorm weights of q and k (diffusers norm_q / norm_k, transformers q_norm / k_norm).
struct QkNorm {
  Tensor query, key;  // [head_dim]
  float eps = 1e-6f;
  // Once for FLUX (torch.nn.RMSNorm); BeforeWeight for Qwen3RMSNorm, which rounds to the weight
  // dtype before the multiply.
  ops::RmsRounding rounding = ops::RmsRounding::Once;
};

/// q [B, L, H, d]; k, v [B, L, Hkv, d].
struct QkvHeads {
  Tensor q, k, v;
};

struct QkNormAttention {
  Linear to_q, to_k, to_v;  // [H*d, D], [Hkv*d, D], [Hkv*d, D]; unbound when the caller projects
  QkNorm norm;
  Linear to_out;  // [D, H*d]; unbound when the caller fuses it (FLUX's gated residual)
  int64_t heads = 0, kv_heads = 0, head_dim = 0;

  /// x [B, L, D] -> q, k, v heads, q and k normed.
  QkvHeads project(const Tensor& x) const;
  /// The same from projections computed elsewhere (columns of a fused GEMM): q [B, L, H*d],
  /// k and v [B, L, Hkv*d].
  QkvHeads heads_of(const Tensor& q, const Tensor& k, const Tensor& v) const;
  /// to_out(attention(project(x))): x [B, L, D] -> [B, L, D].
  Tensor operator()(const Tensor& x, const ops::AttentionOptions& options) const;
};

/// ops::attention over heads, merged back: [B, Lq, H*d].
Tensor attend(const QkvHeads& qkv, const ops::AttentionOptions& options);
/// The same into a preallocated out [B, L, H*d] of q's dtype (unit column stride, any row stride:
/// the attention columns of a FLUX single block's [attention ; MLP] buffer).
void attend_into(const QkvHeads& qkv, const ops::AttentionOptions& options, const Tensor& out);

}  // namespace fluxrt::nn
