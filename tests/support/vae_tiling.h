#pragma once
// The TilingOptions the VAE tests force, so each test says which pass it wants in one call instead
// of setting the mode, tile and overlap by hand (and cannot forget a field, e.g. band_rows, whose
// value changes the lean estimate a test compares with).
#include <cstddef>

#include "models/vae/vae_tiling_plan.h"

namespace fluxrt::test {

// Blended tiles whatever the estimates say (TilingMode::Always): tile_pixels-wide tiles with
// overlap_pixels of overlap (image pixels, multiples of 16 for FLUX.2, 8 for FLUX.1).
inline models::TilingOptions forced_tiles(int tile_pixels, int overlap_pixels) {
  models::TilingOptions t;
  t.mode = models::TilingMode::Always;
  t.tile_pixels = tile_pixels;
  t.overlap_pixels = overlap_pixels;
  return t;
}

// Auto's choice (plain, lean, tiles) against a fixed budget instead of the machine's free memory,
// with these tiles when it falls through to tiling.
inline models::TilingOptions auto_tiles(size_t memory_budget_bytes, int tile_pixels, int overlap_pixels) {
  models::TilingOptions t = forced_tiles(tile_pixels, overlap_pixels);
  t.mode = models::TilingMode::Auto;
  t.memory_budget_bytes = memory_budget_bytes;
  return t;
}

// The lean exact pass with band_rows output rows per convolution band: a few rows put band seams
// inside every level of the tiny test VAEs.
inline models::TilingOptions lean_bands(int band_rows) {
  models::TilingOptions t;
  t.mode = models::TilingMode::Lean;
  t.band_rows = band_rows;
  return t;
}

}  // namespace fluxrt::test
