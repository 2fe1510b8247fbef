#pragma once
// AdaLN-Zero modulation as both FLUX transformers use it (diffusers AdaLayerNormZero /
// Flux2Modulation): a linear on the activated conditioning vector gives `sets` triples of
// (shift, scale, gate), each [B, D]; a block normalises with (1 + scale) and shift and gates its
// residual with gate. FLUX.1 computes them per block, FLUX.2 once per forward for all blocks.
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/linear.h"

namespace fluxrt::nn {

/// One (shift, scale, gate) triple: [B, D] views into the modulation output.
struct AdaLnParams {
  Tensor shift, scale, gate;
};

/// mod [B, sets * 3 * D] -> `sets` triples in the reference's chunk order (shift, scale, gate,
/// shift, scale, gate, ...); views, no copies.
std::vector<AdaLnParams> split_modulation(const Tensor& mod, int sets);

/// LayerNorm without affine (eps) * (1 + p.scale) + p.shift in one pass: x [B, L, D] -> [B, L, D].
Tensor adaln(const Tensor& x, const AdaLnParams& p, float eps);

struct Modulation {
  Linear lin;    // [sets * 3 * D, D]
  int sets = 1;  // 2 for a double-stream block's attention and MLP halves, 1 for a single block

  /// emb_act [B, D] (the conditioning vector after SiLU) -> `sets` triples of [B, D].
  std::vector<AdaLnParams> operator()(const Tensor& emb_act) const;
};

}  // namespace fluxrt::nn
