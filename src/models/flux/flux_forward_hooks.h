#pragma once
// Where a step cache (pipelines/step_cache.h: diffusers' First-Block Cache, MagCache and
// TaylorSeer hooks) reaches into one FLUX.1 or FLUX.2 transformer call. diffusers attaches its
// caches as hooks on the transformer's block lists and attention modules; these are the same
// places, named once for both transformers, which call them in this order:
//
//   cached_output()                   whole call predicted (TaylorSeer lite: `proj_out`)
//   blocks_cached(img, txt)           before double block 0 (MagCache's head hook)
//   double block 0
//   rest_cached(img_in, img, txt)     after it (First-Block Cache's head hook)
//   every block's attention:          attention_cached / attention_computed (TaylorSeer)
//   blocks_computed(h, text_tokens)   after the last block (both caches' tail hooks)
//   output_computed(out)
//
// Every method's default leaves the call as it is; a transformer called without hooks runs the
// fused path it always ran (no output is materialised for a cache).
#include <cstddef>
#include <vector>

#include "core/tensor.h"

namespace fluxrt::models {

class FluxForwardHooks {
 public:
  virtual ~FluxForwardHooks() = default;

  // Defined: this call's output [B, Li, out], and nothing of the call runs.
  virtual Tensor cached_output() { return {}; }
  virtual void output_computed(const Tensor& /*out*/) {}

  // Before the blocks, with their inputs img [B, Li, D] and txt [B, Lt, D]. True: the hook has
  // set them to what the blocks give and no block runs.
  virtual bool blocks_cached(Tensor& /*img*/, Tensor& /*txt*/) { return false; }
  // After double block 0 with its image input and its outputs. True: the hook has set img and txt
  // to what the remaining blocks give and none of them runs.
  virtual bool rest_cached(const Tensor& /*img_in*/, Tensor& /*img*/, Tensor& /*txt*/) { return false; }
  // After a call that ran every block: h = [txt ; img] [B, Lt + Li, D].
  virtual void blocks_computed(const Tensor& /*h*/, int64_t /*text_tokens*/) {}

  // Attention modules (diffusers' `transformer_blocks.i.attn`, then `single_transformer_blocks.i.attn`,
  // numbered in that order). When attention_hooked(), every block materialises its attention
  // module's outputs: a double block's projected (img, txt) outputs; a FLUX.1 single block's
  // attention [B, L, D] before linear2; a FLUX.2 single block's linear2 output (its `attn` is the
  // parallel attention + MLP).
  virtual bool attention_hooked() const { return false; }
  // True: this call's attention outputs come from cached_attention instead of being computed.
  virtual bool attention_cached() const { return false; }
  virtual std::vector<Tensor> cached_attention(size_t /*module*/) { return {}; }
  virtual void attention_computed(size_t /*module*/, const std::vector<Tensor>& /*outputs*/) {}
};

}  // namespace fluxrt::models
