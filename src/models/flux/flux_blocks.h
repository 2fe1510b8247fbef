#pragma once
// The transformer blocks FLUX.1 and FLUX.2 share (flux-reference.md 2.1): one double-stream block
// and one single-stream block, on nn:: layers. The math is the same in both models; what differs
// is carried by the weights:
// - the MLP: FLUX.1 GELU-tanh (fused into the GEMM), FLUX.2 SwiGLU on a [2M, D] projection;
// - where the modulation comes from: FLUX.1 runs a modulation linear per block on SiLU(vec),
//   FLUX.2 computes three modulations once per forward from SiLU(temb); callers pass the result;
// - the single block's input projection: FLUX.1 binds q, k, v and the MLP input as separate GEMMs
//   (row views of linear1), FLUX.2 runs linear1 as one GEMM and takes its columns;
// - biases (FLUX.1) or none (FLUX.2), which only change what the Linears hold.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/flux/flux_common.h"
#include "models/flux/flux_forward_hooks.h"
#include "nn/attention.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/modulation.h"

namespace fluxrt::models {

// One stream (img_* or txt_*) of a double block.
struct FluxStream {
  nn::QkNormAttention attn;  // to_q/to_k/to_v + norm_q/norm_k; to_out is the gated `proj`
  nn::Mlp mlp;               // in = mlp.0, out = mlp.2 (the gated residual)
  nn::Modulation mod;        // FLUX.1 only: img_mod / txt_mod (6D); unbound in FLUX.2
};

struct FluxDoubleBlock {
  FluxStream img, txt;
};

struct FluxSingleBlock {
  nn::QkNormAttention attn;  // FLUX.1: q, k, v bound; FLUX.2: only the norms (q, k, v are linear1's columns)
  nn::Mlp mlp;               // FLUX.1: in = the MLP rows of linear1; FLUX.2: activation only
  nn::Linear linear1;        // FLUX.2: [3D + 2M, D] fused q, k, v, MLP input; unbound in FLUX.1
  nn::Linear linear2;        // [D, D + M]
  nn::Modulation mod;        // FLUX.1 only (3D); unbound in FLUX.2
};

// The attention options both blocks use: RoPE in FLUX's adjacent-pair layout over [txt ; img].
ops::AttentionOptions flux_attention_options(const FluxRope& rope);

// One attention module's share of diffusers' Flux2KVCache (FLUX.2-klein-9B-KV): the reference
// tokens' keys, QK-normed but not rotated (the attention kernel rotates keys as it reads them,
// by the key RoPE table), and values, [B or 1, Lr, H, d].
struct FluxReferenceKv {
  Tensor k, v;
};

// How a block's attention meets reference tokens kept as keys and values:
// - `cached`: their keys and values are inserted after the first `text_tokens` keys (diffusers'
//   "cached" mode); the attention options then carry key tables over [txt ; ref ; img] and query
//   tables over [txt ; img]. A batch of 1 is broadcast to the block's batch.
// - `record`: receives the block's own keys and values (the reference-only pass).
struct FluxKvAccess {
  const FluxReferenceKv* cached = nullptr;
  FluxReferenceKv* record = nullptr;
  int64_t text_tokens = 0;
};

// diffusers FluxTransformerBlock / Flux2TransformerBlock.forward: img [B, Li, D] and txt
// [B, Lt, D] updated in place; mod_img / mod_txt the (attention, MLP) modulation pairs. With
// `hooks` whose attention_hooked(), the attention module's outputs are materialised (or taken
// from the cache) as attention module `module`. An undefined `txt` runs the image stream alone
// (the reference-only pass of klein-9B-KV, whose reference tokens attend only to each other).
void flux_double_block(const FluxDoubleBlock& blk, Tensor& img, Tensor& txt,
                       const std::vector<nn::AdaLnParams>& mod_img,
                       const std::vector<nn::AdaLnParams>& mod_txt, const ops::AttentionOptions& attention,
                       float eps, FluxForwardHooks* hooks = nullptr, size_t module = 0,
                       const FluxKvAccess& kv = {});

// diffusers FluxSingleTransformerBlock / Flux2SingleTransformerBlock.forward on x [B, L, D]
// ([txt ; img]), in place; hooks and kv as above.
void flux_single_block(const FluxSingleBlock& blk, Tensor& x, const nn::AdaLnParams& mod,
                       const ops::AttentionOptions& attention, float eps, FluxForwardHooks* hooks = nullptr,
                       size_t module = 0, const FluxKvAccess& kv = {});

// Each block's modulation: FLUX.1 computes it per block, FLUX.2 once per call for all.
struct FluxBlockModulations {
  // (attention, MLP) pairs of the image and the text stream.
  std::function<std::pair<std::vector<nn::AdaLnParams>, std::vector<nn::AdaLnParams>>(const FluxDoubleBlock&)>
      double_block;
  std::function<nn::AdaLnParams(const FluxSingleBlock&)> single_block;
};

// The block stack both transformers run: the double blocks on img [B, Li, D] and txt [B, Lt, D],
// then the single blocks on [txt ; img]. Returns h = [txt ; img] [B, Lt + Li, D] after the last
// block. `hooks` (may be null) is where a step cache skips blocks (flux_forward_hooks.h).
// `reference_kv` (may be null): each attention module's cached reference keys and values
// (doubles, then singles), inserted after the text keys (FluxKvAccess::cached).
Tensor flux_block_stack(const std::vector<FluxDoubleBlock>& doubles,
                        const std::vector<FluxSingleBlock>& singles, Tensor img, Tensor txt,
                        const FluxBlockModulations& mods, const ops::AttentionOptions& attention, float eps,
                        FluxForwardHooks* hooks, const std::vector<FluxReferenceKv>* reference_kv = nullptr);

}  // namespace fluxrt::models
