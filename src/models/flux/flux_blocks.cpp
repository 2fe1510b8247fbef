#include "models/flux/flux_blocks.h"

#include "ops/elementwise.h"

namespace fluxrt::models {

ops::AttentionOptions flux_attention_options(const FluxRope& rope) {
  ops::AttentionOptions opt;
  opt.rope = ops::RopeLayout::AdjacentPairs;
  opt.rope_table = {rope.cos, rope.sin};
  return opt;
}

void flux_double_block(const FluxDoubleBlock& blk, Tensor& img, Tensor& txt,
                       const std::vector<nn::AdaLnParams>& mod_img,
                       const std::vector<nn::AdaLnParams>& mod_txt, const ops::AttentionOptions& attention,
                       float eps) {
  const int64_t lt = txt.size(1), l = lt + img.size(1);
  const nn::QkvHeads hi = blk.img.attn.project(nn::adaln(img, mod_img[0], eps));  // [B, Li, H, d] x 3
  const nn::QkvHeads ht = blk.txt.attn.project(nn::adaln(txt, mod_txt[0], eps));  // [B, Lt, H, d] x 3

  // Joint attention over [txt ; img] (text first).
  const nn::QkvHeads joint{ops::concat({ht.q, hi.q}, 1), ops::concat({ht.k, hi.k}, 1),
                           ops::concat({ht.v, hi.v}, 1)};  // [B, L, H, d] x 3
  const Tensor attn = nn::attend(joint, attention);        // [B, L, D]

  auto finish = [&](const FluxStream& s, Tensor& x, const std::vector<nn::AdaLnParams>& mod,
                    const Tensor& attn_x) {
    s.attn.to_out.add_gated_residual(attn_x, mod[0].gate, x);       // x += g1 * proj(attn)
    const Tensor n = nn::adaln(x, mod[1], eps);                     // [B, Lx, D]
    s.mlp.out.add_gated_residual(s.mlp.hidden(n), mod[1].gate, x);  // x += g2 * mlp(n)
  };
  finish(blk.img, img, mod_img, attn.slice(1, lt, l));
  finish(blk.txt, txt, mod_txt, attn.slice(1, 0, lt));
}

void flux_single_block(const FluxSingleBlock& blk, Tensor& x, const nn::AdaLnParams& mod,
                       const ops::AttentionOptions& attention, float eps) {
  const nn::QkNormAttention& a = blk.attn;
  const int64_t d = a.heads * a.head_dim, m = blk.linear2.in_features() - d;
  const Tensor n = nn::adaln(x, mod, eps);  // [B, L, D]
  // linear2's input [attention ; MLP], written in place by both (no concat copies it).
  const Tensor cat = Tensor::empty({x.size(0), x.size(1), d + m}, x.dtype(), x.device());  // [B, L, D + M]
  nn::QkvHeads qkv;                                                                        // [B, L, H, d] x 3
  if (blk.linear1) {
    // FLUX.2: q, k, v and the MLP input in one GEMM.
    const Tensor h = blk.linear1(n);  // [B, L, 3D + 2M]
    // q and k are normalised out of h's columns; v is copied out so that h, the widest
    // activation of the block, is freed before the attention.
    qkv = a.heads_of(h.narrow(2, 0, d), h.narrow(2, d, d), h.narrow(2, 2 * d, d).contiguous());
    blk.mlp.activate_into(h.narrow(2, 3 * d, h.size(2) - 3 * d), cat.narrow(2, d, m));
  } else {
    // FLUX.1: separate GEMMs on row views of linear1.
    qkv = a.project(n);
    blk.mlp.hidden_into(n, cat.narrow(2, d, m));
  }
  nn::attend_into(qkv, attention, cat.narrow(2, 0, d));
  blk.linear2.add_gated_residual(cat, mod.gate, x);  // x += gate * linear2([attn ; mlp])
}

}  // namespace fluxrt::models
