#pragma once
// FLUX.1 checkpoint layouts -> the model's canonical names (flux-reference.md sections 3.2, 3.3),
// and fp8 single files -> bf16.
//
// Canonical naming = the BFL single-file names (weights and biases), with fused tensors split
// into zero-copy row views so that BOTH layouts bind without copying a byte:
//   double_blocks.N.{img,txt}_attn.qkv.{weight,bias} [3D, ...] -> ...{img,txt}_attn.{q,k,v}.*
//       (diffusers: to_q/to_k/to_v and add_{q,k,v}_proj)
//   single_blocks.N.linear1.{weight,bias} [3D + M, ...] -> single_blocks.N.{q,k,v,mlp}.*
//       (diffusers: attn.to_q/to_k/to_v and proj_mlp; D is read from the block's linear2 rows)
//   final_layer.adaLN_modulation.1.{weight,bias} [2D, ...] (BFL rows: shift, scale)
//       -> final_layer.shift.*, final_layer.scale.* (diffusers norm_out.linear holds the rows as
//          (scale, shift): the swap is just which view gets which name)
// Everything else keeps its BFL name (diffusers names are renamed). A name the map does not know is
// kept unchanged so WeightBinder reports it as unused; a fused tensor whose rows cannot be split is
// kept under its own name too (reported as unused next to the missing parts).
#include <string>

#include "models/weight_binder.h"

namespace fluxrt::models {

enum class Flux1Layout { Diffusers, Bfl, Canonical };

const char* flux1_layout_name(Flux1Layout layout);

// Detects the layout from the names: `x_embedder.weight` (diffusers), `img_in.weight` /
// `double_blocks.0.img_attn.qkv.weight` / `final_layer.adaLN_modulation.1.weight` (BFL). A
// ComfyUI-style `model.diffusion_model.` prefix is accepted. Format error when neither matches,
// and when the names are FLUX.2's (shared modulation, no biases), saying so.
Flux1Layout flux1_detect_layout(const TensorStore& raw);

// One diffusers weight name -> its canonical name for the 1:1 renames
// (`transformer_blocks.0.attn.to_q.weight` -> `double_blocks.0.img_attn.q.weight`); names it does
// not rename come back unchanged. The LoRA key tables (models/lora/) use it so that LoRA modules
// and checkpoints share one map.
std::string flux1_canonical_name_of_diffusers(const std::string& diffusers_name);

// Renames/splits `raw` (keys exactly as stored, prefix allowed) into canonical names. All tensors
// stay zero-copy views of the input tensors.
TensorStore flux1_to_canonical(const TensorStore& raw);

// The inverse for tests and tools: canonical -> BFL names (re-fusing makes copies).
TensorStore flux1_canonical_to_bfl(const TensorStore& canonical);

}  // namespace fluxrt::models
