#pragma once
// The reference tile blending kernels (f64 arithmetic, one rounding per stored value).
#include "backend/args/tile_blend.h"

namespace fluxrt::backend::ref {

void tile_blend(const TileBlendArgs& a);
void tile_normalize(const TileNormalizeArgs& a);

}  // namespace fluxrt::backend::ref
