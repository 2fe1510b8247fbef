#pragma once
// Shared by the tile blending tests (CPU vs ref, CUDA vs CPU): a grid of overlapping random tiles
// as the VAE's tiled passes lay them out, and a runner that blends them with the current kernel
// table on a chosen device.
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/tile_blend.h"
#include "support/random_tensor.h"

namespace fluxrt::test {

struct TileGrid {
  int64_t B = 1, C = 3, H = 0, W = 0, tile = 0, overlap = 0;
  std::vector<int64_t> ys, xs;  // tile starts (the last flush with the end, as vae_tile_starts)
};

inline std::vector<int64_t> tile_starts(int64_t n, int64_t t, int64_t o) {
  if (n <= t) return {0};
  std::vector<int64_t> s;
  for (int64_t p = 0;; p += t - o) {
    if (p + t >= n) {
      s.push_back(n - t);
      return s;
    }
    s.push_back(p);
  }
}

inline TileGrid make_grid(int64_t B, int64_t C, int64_t H, int64_t W, int64_t tile, int64_t overlap) {
  TileGrid g{B, C, H, W, tile, overlap, tile_starts(H, tile, overlap), tile_starts(W, tile, overlap)};
  return g;
}

inline int64_t tile_h(const TileGrid& g) { return g.H < g.tile ? g.H : g.tile; }
inline int64_t tile_w(const TileGrid& g) { return g.W < g.tile ? g.W : g.tile; }

// The tiles of the grid, row-major, random in `dtype` on the host.
inline std::vector<Tensor> random_tiles(const TileGrid& g, DType dtype, uint64_t seed) {
  std::vector<Tensor> tiles;
  for (size_t i = 0; i < g.ys.size() * g.xs.size(); ++i)
    tiles.push_back(random_uniform({g.B, g.C, tile_h(g), tile_w(g)}, dtype, seed + i, -3, 3));
  return tiles;
}

inline ops::TilePlacement placement(const TileGrid& g, size_t iy, size_t ix) {
  ops::TilePlacement at;
  at.top = g.ys[iy];
  at.left = g.xs[ix];
  at.ramp = g.overlap;
  at.ramp_top = iy > 0;
  at.ramp_bottom = iy + 1 < g.ys.size();
  at.ramp_left = ix > 0;
  at.ramp_right = ix + 1 < g.xs.size();
  return at;
}

struct Blended {
  Tensor acc, weight_sum, image;  // on the device they were computed on
};

// Blends `tiles` (host tensors, moved to `device` first) and normalises to `out_dtype`.
inline Blended blend_on(Device device, const TileGrid& g, const std::vector<Tensor>& tiles, DType out_dtype) {
  Blended r;
  r.acc = Tensor::zeros({g.B, g.C, g.H, g.W}, DType::F32, device);
  r.weight_sum = Tensor::zeros({g.H, g.W}, DType::F32, device);
  size_t k = 0;
  for (size_t iy = 0; iy < g.ys.size(); ++iy)
    for (size_t ix = 0; ix < g.xs.size(); ++ix) {
      Tensor t = Tensor::empty(tiles[k].shape(), tiles[k].dtype(), device);
      t.copy_from(tiles[k++]);
      ops::tile_blend_(r.acc, r.weight_sum, t, placement(g, iy, ix));
    }
  r.image = ops::tile_normalize(r.acc, r.weight_sum, out_dtype);
  return r;
}

}  // namespace fluxrt::test
