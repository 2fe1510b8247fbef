#pragma once
// FLUX.2 checkpoint layouts -> the model's canonical names (flux-reference.md sections 3.4, 3.5).
//
// Canonical naming = the BFL single-file names, with two tensors split into zero-copy row views so
// that BOTH layouts bind without copying a byte:
//   double_blocks.N.{img,txt}_attn.qkv.weight [3D, D]  -> ...{img,txt}_attn.{q,k,v}.weight [D, D]
//       (diffusers stores to_q/to_k/to_v and add_{q,k,v}_proj separately: used as they are)
//   final_layer.adaLN_modulation.1.weight [2D, D] (BFL rows: shift, scale)
//       -> final_layer.shift.weight, final_layer.scale.weight [D, D]
//       (diffusers norm_out.linear.weight holds the same rows as (scale, shift): the swap is just
//        which view gets which name)
// Everything else keeps its BFL name (diffusers names are renamed; single-block linear1/linear2
// are fused in both layouts). A name the map does not know is kept unchanged so WeightBinder
// reports it as unused; a fused tensor whose rows cannot be split is kept under its own name too
// (reported as unused next to the missing q/k/v).
#include <string>

#include "io/safetensors.h"
#include "models/weight_binder.h"

namespace fluxrt::models {

enum class Flux2Layout { Diffusers, Bfl, Canonical };

const char* flux2_layout_name(Flux2Layout layout);

// Detects the layout from the names: `x_embedder.weight` (diffusers), `img_in.weight` with a fused
// `...qkv.weight` or `final_layer.adaLN_modulation.1.weight` (BFL). A ComfyUI-style
// `model.diffusion_model.` prefix is accepted and removed. Format error when neither matches.
Flux2Layout flux2_detect_layout(const TensorStore& raw);

// One diffusers weight name -> its canonical name for the 1:1 renames
// (`transformer_blocks.0.attn.to_q.weight` -> `double_blocks.0.img_attn.q.weight`); names it does
// not rename come back unchanged. The LoRA key tables (models/lora/) use it so that LoRA modules
// and checkpoints share one map.
std::string flux2_canonical_name_of_diffusers(const std::string& diffusers_name);

// Renames/splits `raw` (keys exactly as stored in the checkpoint) into canonical names. All tensors
// stay zero-copy views of the input tensors.
TensorStore flux2_to_canonical(const TensorStore& raw);

// The inverse for tests and tools: canonical -> BFL names (re-fusing q/k/v and the final layer
// makes copies).
TensorStore flux2_canonical_to_bfl(const TensorStore& canonical);

}  // namespace fluxrt::models
