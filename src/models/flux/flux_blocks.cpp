#include "models/flux/flux_blocks.h"

#include "core/error.h"
#include "nn/modulation.h"
#include "ops/elementwise.h"

namespace fluxrt::models {

ops::AttentionOptions flux_attention_options(const FluxRope& rope) {
  ops::AttentionOptions opt;
  opt.rope = ops::RopeLayout::AdjacentPairs;
  opt.rope_table = {rope.cos, rope.sin};
  return opt;
}

namespace {

// x [B, L, H, d] with `refs` [B or 1, Lr, H, d] inserted after its first `at` rows.
Tensor with_reference_rows(const Tensor& x, const Tensor& refs, int64_t at) {
  const int64_t b = x.size(0), l = x.size(1);
  const Tensor r = refs.size(0) == b ? refs : refs.expand({b, refs.size(1), refs.size(2), refs.size(3)});
  return ops::concat({x.slice(1, 0, at), r, x.slice(1, at, l)}, 1);  // [B, L + Lr, H, d]
}

// The block's keys and values as the attention reads them: the cached reference rows inserted,
// and this block's own kept when recording.
void meet_reference_kv(nn::QkvHeads& qkv, const FluxKvAccess& kv) {
  if (kv.record) *kv.record = {qkv.k, qkv.v};
  if (kv.cached) {
    qkv.k = with_reference_rows(qkv.k, kv.cached->k, kv.text_tokens);
    qkv.v = with_reference_rows(qkv.v, kv.cached->v, kv.text_tokens);
  }
}

}  // namespace

void flux_double_block(const FluxDoubleBlock& blk, Tensor& img, Tensor& txt,
                       const std::vector<nn::AdaLnParams>& mod_img,
                       const std::vector<nn::AdaLnParams>& mod_txt, const ops::AttentionOptions& attention,
                       float eps, FluxForwardHooks* hooks, size_t module, const FluxKvAccess& kv) {
  const bool hooked = hooks && hooks->attention_hooked();
  FLUXRT_CHECK(!hooked || (!kv.cached && !kv.record && txt.defined()), ErrorCode::Internal,
               "flux_double_block: a step cache with reference keys and values");
  if (!txt.defined()) {
    // The image stream alone: its tokens attend to each other only.
    nn::QkvHeads hi = blk.img.attn.project(nn::adaln(img, mod_img[0], eps));  // [B, Li, H, d] x 3
    meet_reference_kv(hi, kv);
    blk.img.attn.to_out.add_gated_residual(nn::attend(hi, attention), mod_img[0].gate, img);
    const Tensor n = nn::adaln(img, mod_img[1], eps);
    blk.img.mlp.out.add_gated_residual(blk.img.mlp.hidden(n), mod_img[1].gate, img);
    return;
  }
  const int64_t lt = txt.size(1), l = lt + img.size(1);
  auto mlp = [&](const FluxStream& s, Tensor& x, const std::vector<nn::AdaLnParams>& mod) {
    const Tensor n = nn::adaln(x, mod[1], eps);                     // [B, Lx, D]
    s.mlp.out.add_gated_residual(s.mlp.hidden(n), mod[1].gate, x);  // x += g2 * mlp(n)
  };
  if (hooked && hooks->attention_cached()) {
    // The attention module's projected (img, txt) outputs from the cache; the rest runs.
    const std::vector<Tensor> out = hooks->cached_attention(module);
    ops::gated_residual_(img, mod_img[0].gate, out[0]);  // img += g1 * attn_img
    ops::gated_residual_(txt, mod_txt[0].gate, out[1]);  // txt += g1 * attn_txt
    mlp(blk.img, img, mod_img);
    mlp(blk.txt, txt, mod_txt);
    return;
  }
  const nn::QkvHeads hi = blk.img.attn.project(nn::adaln(img, mod_img[0], eps));  // [B, Li, H, d] x 3
  const nn::QkvHeads ht = blk.txt.attn.project(nn::adaln(txt, mod_txt[0], eps));  // [B, Lt, H, d] x 3

  // Joint attention over [txt ; img] (text first); cached reference keys after the text's.
  nn::QkvHeads joint{ops::concat({ht.q, hi.q}, 1), ops::concat({ht.k, hi.k}, 1),
                     ops::concat({ht.v, hi.v}, 1)};  // [B, L, H, d] x 3
  meet_reference_kv(joint, {kv.cached, nullptr, lt});
  const Tensor attn = nn::attend(joint, attention);  // [B, L, D]

  if (hooked) {
    // diffusers' order: to_out, then the gate, then the residual, each rounded, as the cache
    // sees the projected outputs.
    const std::vector<Tensor> out{blk.img.attn.to_out(attn.slice(1, lt, l).contiguous()),   // [B, Li, D]
                                  blk.txt.attn.to_out(attn.slice(1, 0, lt).contiguous())};  // [B, Lt, D]
    hooks->attention_computed(module, out);
    ops::gated_residual_(img, mod_img[0].gate, out[0]);
    ops::gated_residual_(txt, mod_txt[0].gate, out[1]);
    mlp(blk.img, img, mod_img);
    mlp(blk.txt, txt, mod_txt);
    return;
  }
  auto finish = [&](const FluxStream& s, Tensor& x, const std::vector<nn::AdaLnParams>& mod,
                    const Tensor& attn_x) {
    s.attn.to_out.add_gated_residual(attn_x, mod[0].gate, x);  // x += g1 * proj(attn)
    mlp(s, x, mod);
  };
  finish(blk.img, img, mod_img, attn.slice(1, lt, l));
  finish(blk.txt, txt, mod_txt, attn.slice(1, 0, lt));
}

void flux_single_block(const FluxSingleBlock& blk, Tensor& x, const nn::AdaLnParams& mod,
                       const ops::AttentionOptions& attention, float eps, FluxForwardHooks* hooks,
                       size_t module, const FluxKvAccess& kv) {
  const bool hooked = hooks && hooks->attention_hooked();
  FLUXRT_CHECK(!hooked || (!kv.cached && !kv.record), ErrorCode::Internal,
               "flux_single_block: a step cache with reference keys and values");
  const bool cached = hooked && hooks->attention_cached();
  const nn::QkNormAttention& a = blk.attn;
  const int64_t d = a.heads * a.head_dim, m = blk.linear2.in_features() - d;
  if (cached && blk.linear1) {
    // FLUX.2's `attn` is the whole parallel attention + MLP: only the gated residual runs.
    ops::gated_residual_(x, mod.gate, hooks->cached_attention(module)[0]);  // x += gate * attn
    return;
  }
  const Tensor n = nn::adaln(x, mod, eps);  // [B, L, D]
  // linear2's input [attention ; MLP], written in place by both (no concat copies it).
  const Tensor cat = Tensor::empty({x.size(0), x.size(1), d + m}, x.dtype(), x.device());  // [B, L, D + M]
  if (cached) {
    // FLUX.1: the attention [B, L, D] from the cache, the MLP computed.
    cat.narrow(2, 0, d).copy_from(hooks->cached_attention(module)[0]);
    blk.mlp.hidden_into(n, cat.narrow(2, d, m));
    blk.linear2.add_gated_residual(cat, mod.gate, x);
    return;
  }
  nn::QkvHeads qkv;  // [B, L, H, d] x 3
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
  meet_reference_kv(qkv, kv);
  nn::attend_into(qkv, attention, cat.narrow(2, 0, d));
  if (hooked && blk.linear1) {
    const Tensor out = blk.linear2(cat);  // [B, L, D], the module output the cache sees
    hooks->attention_computed(module, {out});
    ops::gated_residual_(x, mod.gate, out);
    return;
  }
  if (hooked) hooks->attention_computed(module, {cat.narrow(2, 0, d).contiguous()});
  blk.linear2.add_gated_residual(cat, mod.gate, x);  // x += gate * linear2([attn ; mlp])
}

Tensor flux_block_stack(const std::vector<FluxDoubleBlock>& doubles,
                        const std::vector<FluxSingleBlock>& singles, Tensor img, Tensor txt,
                        const FluxBlockModulations& mods, const ops::AttentionOptions& attention, float eps,
                        FluxForwardHooks* hooks, const std::vector<FluxReferenceKv>* reference_kv) {
  const int64_t lt = txt.size(1);
  FLUXRT_CHECK(!reference_kv || reference_kv->size() == doubles.size() + singles.size(), ErrorCode::Internal,
               "flux_block_stack: {} cached reference modules for {} blocks",
               reference_kv ? reference_kv->size() : 0, doubles.size() + singles.size());
  auto kv = [&](size_t module) {
    return FluxKvAccess{reference_kv ? &(*reference_kv)[module] : nullptr, nullptr, lt};
  };
  if (hooks && hooks->blocks_cached(img, txt)) return ops::concat({txt, img}, 1);  // [B, L, D]
  size_t module = 0;
  bool rest_cached = false;
  for (size_t i = 0; i < doubles.size() && !rest_cached; ++i) {
    // The blocks update img in place: the first block's input is kept for the hook.
    const Tensor img_in = i == 0 && hooks ? img.clone() : Tensor();
    const auto [mod_img, mod_txt] = mods.double_block(doubles[i]);
    flux_double_block(doubles[i], img, txt, mod_img, mod_txt, attention, eps, hooks, module, kv(module));
    ++module;
    if (i == 0 && hooks) rest_cached = hooks->rest_cached(img_in, img, txt);
  }
  Tensor h = ops::concat({txt, img}, 1);  // [B, L, D]
  if (rest_cached) return h;
  for (const auto& blk : singles) {
    flux_single_block(blk, h, mods.single_block(blk), attention, eps, hooks, module, kv(module));
    ++module;
  }
  if (hooks) hooks->blocks_computed(h, lt);
  return h;
}

}  // namespace fluxrt::models
