#pragma once
// Blending overlapping tiles into one image on the tensors' device (the VAE's tiled passes), so a
// GPU decode never downloads a tile: start with f32 zeros acc [B, C, H, W] and weight_sum [H, W],
// tile_blend_ each tile's output in, then tile_normalize once.
//
//   Tensor acc = Tensor::zeros({B, C, H, W}, DType::F32, dev), sum = Tensor::zeros({H, W}, DType::F32, dev);
//   for each tile: ops::tile_blend_(acc, sum, out, {top, left, ramp, ramp_top, ramp_bottom, ramp_left,
//   ramp_right}); Tensor image = ops::tile_normalize(acc, sum, DType::BF16);                    // [B, C, H,
//   W]
//
// Weights: separable linear ramps over `ramp` samples on the sides that have a neighbouring tile
// (backend/tile_ramp.h), normalised per pixel, so the seams are smooth cross-fades. f32
// arithmetic, one rounding per operation in a fixed order: every backend gives the same bits.
#include <cstdint>

#include "core/tensor.h"

namespace fluxrt::ops {

struct TilePlacement {
  int64_t top = 0, left = 0;  // where the tile's first pixel goes in the accumulator
  int64_t ramp = 0;           // ramp length in pixels (0: plain sum)
  bool ramp_top = false, ramp_bottom = false, ramp_left = false, ramp_right = false;
};

// acc += w * tile and weight_sum += w over the tile's window (w = wy * wx). tile [B, C, th, tw]
// f32/bf16/f16 (copied when not contiguous); acc [B, C, H, W] and weight_sum [H, W] contiguous f32,
// all on one device; the window must lie inside acc. InvalidArgument otherwise.
void tile_blend_(const Tensor& acc, const Tensor& weight_sum, const Tensor& tile, const TilePlacement& at);

// acc / weight_sum (broadcast over B, C) rounded to `dtype` (f32/bf16/f16): a new contiguous tensor
// on acc's device.
Tensor tile_normalize(const Tensor& acc, const Tensor& weight_sum, DType dtype);

}  // namespace fluxrt::ops
