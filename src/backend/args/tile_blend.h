#pragma once
// Argument structs for blending overlapping tiles into one image on the tensors' device (the VAE's
// tiled decode/encode): each tile is added into an f32 accumulator with separable linear-ramp
// weights (backend/tile_ramp.h) while the weights themselves are summed per pixel, then the
// accumulator is divided by that sum and rounded to the output dtype. Every tensor here is
// contiguous NCHW (the ops layer checks).
#include "core/tensor.h"

namespace fluxrt::backend {

// acc[b, c, top + i, left + j] += (wy(i) * wx(j)) * tile[b, c, i, j] and
// weight_sum[top + i, left + j] += wy(i) * wx(j), f32, one rounding per operation in this order
// (tile values widened exactly to f32). wy ramps over `ramp` rows at the top / bottom when
// ramp_top / ramp_bottom, wx over `ramp` columns at the left / right likewise.
struct TileBlendArgs {
  Tensor tile;        // [B, C, th, tw], f32 / bf16 / f16
  Tensor acc;         // [B, C, H, W] f32, th <= H - top, tw <= W - left
  Tensor weight_sum;  // [H, W] f32
  int64_t top = 0, left = 0;
  int64_t ramp = 0;  // samples; 0: every weight is 1
  bool ramp_top = false, ramp_bottom = false, ramp_left = false, ramp_right = false;
};

// out[b, c, y, x] = round_to_out_dtype(acc[b, c, y, x] / weight_sum[y, x]) (f32 division).
struct TileNormalizeArgs {
  Tensor acc;         // [B, C, H, W] f32
  Tensor weight_sum;  // [H, W] f32
  Tensor out;         // [B, C, H, W] f32 / bf16 / f16
};

}  // namespace fluxrt::backend
