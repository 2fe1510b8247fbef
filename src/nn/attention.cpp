#include "nn/attention.h"

#include "core/error.h"
#include "ops/kernel_timing.h"

namespace fluxrt::nn {

Tensor split_heads(const Tensor& t, int64_t heads, int64_t head_dim) {
  if (t.dim() == 3 && t.stride(2) == 1) return t.unflatten(2, heads, head_dim);
  const ops::TimedRegion timed("split_heads copy");
  return t.contiguous().view({t.size(0), t.size(1), heads, head_dim});
}

QkvHeads QkNormAttention::heads_of(const Tensor& q, const Tensor& k, const Tensor& v) const {
  QkvHeads h;
  h.q = ops::rms_norm(split_heads(q, heads, head_dim), norm.query, norm.eps, norm.rounding);  // [B, L, H, d]
  h.k =
      ops::rms_norm(split_heads(k, kv_heads, head_dim), norm.key, norm.eps, norm.rounding);  // [B, L, Hkv, d]
  h.v = split_heads(v, kv_heads, head_dim);                                                  // [B, L, Hkv, d]
  return h;
}

QkvHeads QkNormAttention::project(const Tensor& x) const { return heads_of(to_q(x), to_k(x), to_v(x)); }

Tensor QkNormAttention::operator()(const Tensor& x, const ops::AttentionOptions& options) const {
  return to_out(attend(project(x), options));  // [B, L, D]
}

void attend_into(const QkvHeads& qkv, const ops::AttentionOptions& options, const Tensor& out) {
  FLUXRT_CHECK(out.dim() == 3 && qkv.q.dim() == 4 && out.size(2) == qkv.q.size(2) * qkv.q.size(3),
               ErrorCode::InvalidArgument, "[attention] out {} does not hold the heads of q {}", out.str(),
               qkv.q.str());
  ops::attention_into(qkv.q, qkv.k, qkv.v, options, out.unflatten(2, qkv.q.size(2), qkv.q.size(3)));
}

Tensor attend(const QkvHeads& qkv, const ops::AttentionOptions& options) {
  const Tensor out = ops::attention(qkv.q, qkv.k, qkv.v, options);  // [B, Lq, H, d]
  return out.view({out.size(0), out.size(1), out.size(2) * out.size(3)});
}

}  // namespace fluxrt::nn
