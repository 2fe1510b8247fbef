#pragma once
// CPU tile blending (the VAE's tiled passes): f32 with one rounding per operation, in the order
// args/tile_blend.h gives, so the result is the same on every ISA and thread count.
#include "backend/args/tile_blend.h"

namespace fluxrt::backend::cpu {

void tile_blend(const TileBlendArgs& a);
void tile_normalize(const TileNormalizeArgs& a);

}  // namespace fluxrt::backend::cpu
