#pragma once
// The weight deltas of LoRA modules of every kind (lora_file.h), as the trainers compute them, and
// DoRA's renormalisation. docs/lora.md gives the formulas and where each loader differs.
//
// Plain LoRA keeps its low-rank form (lora_delta.h merges and attaches B, A as they are); these
// are for the kinds whose delta is no low-rank product (LoKr, LoHa) and for DoRA, whose norm needs
// the whole merged weight.
#include <vector>

#include "core/tensor.h"
#include "models/lora/lora_file.h"

namespace fluxrt::models {

// The module's whole delta [out, in] in f32, its factor included (the strength not):
//   LoRA  factor * B @ A
//   LoKr  factor * kron(w1, w2), each half w or w_a @ w_b
//   LoHa  factor * (w1_a @ w1_b) * (w2_a @ w2_b)
Tensor lora_module_delta(const LoraModule& m);

// a [m, k] @ b [k, n] in f32 (any float dtypes in), contiguous.
Tensor lora_matmul(const Tensor& a, const Tensor& b);

// DoRA on one module's rows, in place. `weights` are f32 [rows_i, in] blocks that stack to the
// module's layer (several for a fused module split across canonical layers, in B's row order),
// holding W; `deltas` the matching row blocks of the module's delta (its factor in). `magnitude`
// is the module's DoRA magnitude as stored ([out], [out, 1] or [1, in], lora_file.h). The result:
//   W' = W + strength * (m * (W + dW) / ||W + dW|| - W)
// the norm over each output row for an [out] magnitude, over each input column (all blocks
// together) for a [1, in] one, plus f32 epsilon when `eps` (LyCORIS). Strength 1 is every
// trainer's merge; other strengths interpolate from the base, as ComfyUI does.
void apply_dora(const std::vector<Tensor>& weights, const std::vector<Tensor>& deltas,
                const Tensor& magnitude, bool eps, float strength);

}  // namespace fluxrt::models
