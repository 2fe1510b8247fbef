// Tile blending (ops/tile_blend.h), the VAE's tiled passes on the device: the CPU kernels against
// ref on grids of overlapping tiles in every dtype, bitwise against the host loop the VAE used
// before the blending became device ops (so tiled decodes keep their numbers), and the one-line
// errors for bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/kernel_table.h"
#include "core/error.h"
#include "ops/dispatch.h"
#include "support/compare.h"
#include "tile_blend_cases.h"

namespace fluxrt::test {
namespace {

struct GridCase {
  int64_t B, C, H, W, tile, overlap;
};

const std::vector<GridCase> kGrids{
    {1, 3, 40, 24, 16, 4},   // 3 x 2 tiles, the last ones flush with the end
    {2, 5, 16, 16, 16, 4},   // one tile: no ramps
    {1, 2, 33, 70, 24, 8},   // odd sizes, uneven last tiles
    {1, 1, 20, 20, 12, 11},  // overlap nearly the tile
};

Tensor on_host(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  h.copy_from(t);
  return h;
}

TEST(TileBlendConformance, CpuMatchesRefEveryDtype) {
  for (const GridCase& c : kGrids)
    for (DType tile_dtype : {DType::F32, DType::BF16, DType::F16}) {
      const TileGrid g = make_grid(c.B, c.C, c.H, c.W, c.tile, c.overlap);
      SCOPED_TRACE(std::string(dtype_name(tile_dtype)) + " " + Shape({c.B, c.C, c.H, c.W}).str() + " tile " +
                   std::to_string(c.tile) + " overlap " + std::to_string(c.overlap));
      const auto tiles = random_tiles(g, tile_dtype, 100 + c.H);
      Blended ref;
      {
        ops::ScopedKernelTable scope(backend::ref_kernels());
        ref = blend_on(Device::cpu(), g, tiles, tile_dtype);
      }
      const Blended cpu = blend_on(Device::cpu(), g, tiles, tile_dtype);
      EXPECT_TRUE(all_close(cpu.weight_sum, ref.weight_sum, TolClass::Elementwise));
      EXPECT_TRUE(all_close(cpu.acc, ref.acc, TolClass::Elementwise));
      EXPECT_TRUE(all_close(cpu.image, ref.image, TolClass::Norm));
      EXPECT_EQ(cpu.image.dtype(), tile_dtype);
    }
}

// The blending loop autoencoder_kl.cpp ran on the host before: f32 ramps, acc += wy * wx * x,
// weights summed, divided, rounded to the output dtype. The device ops must keep these bits.
Tensor host_loop_blend(const TileGrid& g, const std::vector<Tensor>& tiles, DType out_dtype) {
  auto ramp_weights = [](int64_t len, int64_t ramp, bool left, bool right) {
    std::vector<float> w(static_cast<size_t>(len), 1.0f);
    for (int64_t i = 0; i < len && ramp > 0; ++i) {
      float v = 1.0f;
      if (left && i < ramp) v = std::min(v, (static_cast<float>(i) + 0.5f) / static_cast<float>(ramp));
      if (right && len - 1 - i < ramp)
        v = std::min(v, (static_cast<float>(len - 1 - i) + 0.5f) / static_cast<float>(ramp));
      w[static_cast<size_t>(i)] = v;
    }
    return w;
  };
  Tensor acc = Tensor::zeros({g.B, g.C, g.H, g.W}, DType::F32), wsum = Tensor::zeros({g.H, g.W}, DType::F32);
  float* dst = acc.data<float>();
  float* ws = wsum.data<float>();
  size_t k = 0;
  for (size_t iy = 0; iy < g.ys.size(); ++iy)
    for (size_t ix = 0; ix < g.xs.size(); ++ix) {
      const Tensor out = tiles[k++].to(DType::F32).contiguous();
      const int64_t oth = out.size(2), otw = out.size(3), oy = g.ys[iy], ox = g.xs[ix];
      const auto wy = ramp_weights(oth, g.overlap, iy > 0, iy + 1 < g.ys.size());
      const auto wx = ramp_weights(otw, g.overlap, ix > 0, ix + 1 < g.xs.size());
      const float* src = out.data<float>();
      for (int64_t bc = 0; bc < g.B * g.C; ++bc)
        for (int64_t i = 0; i < oth; ++i)
          for (int64_t j = 0; j < otw; ++j)
            dst[(bc * g.H + oy + i) * g.W + ox + j] += wy[i] * wx[j] * src[(bc * oth + i) * otw + j];
      for (int64_t i = 0; i < oth; ++i)
        for (int64_t j = 0; j < otw; ++j) ws[(oy + i) * g.W + ox + j] += wy[i] * wx[j];
    }
  for (int64_t bc = 0; bc < g.B * g.C; ++bc)
    for (int64_t p = 0; p < g.H * g.W; ++p) dst[bc * g.H * g.W + p] /= ws[p];
  return acc.to(out_dtype);
}

TEST(TileBlendConformance, CpuKeepsTheHostLoopBitsOnCpuAndCpu1) {
  for (const GridCase& c : kGrids)
    for (DType dtype : {DType::F32, DType::BF16}) {
      const TileGrid g = make_grid(c.B, c.C, c.H, c.W, c.tile, c.overlap);
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + Shape({c.B, c.C, c.H, c.W}).str());
      const auto tiles = random_tiles(g, dtype, 7 + c.W);
      const Tensor want = host_loop_blend(g, tiles, dtype);
      for (Device d : {Device::cpu(), Device::placement_check()}) {
        const Tensor got = on_host(blend_on(d, g, tiles, dtype).image);
        ASSERT_EQ(got.shape(), want.shape());
        EXPECT_EQ(0, std::memcmp(got.raw_data(), want.raw_data(), want.nbytes())) << d.str();
      }
    }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

TEST(TileBlendConformance, BadArgumentsGiveOneLineErrors) {
  const Tensor acc = Tensor::zeros({1, 3, 8, 8}, DType::F32), sum = Tensor::zeros({8, 8}, DType::F32);
  const Tensor tile = Tensor::zeros({1, 3, 4, 4}, DType::F32);
  ops::TilePlacement outside;
  outside.top = 6;
  std::vector<std::string> messages = {
      error_of([&] { ops::tile_blend_(acc, sum, tile, outside); }),
      error_of([&] {
        ops::tile_blend_(acc, sum, Tensor::zeros({1, 2, 4, 4}, DType::F32), {});
      }),
      error_of([&] { ops::tile_blend_(acc.to(DType::BF16), sum, tile, {}); }),
      error_of([&] {
        ops::tile_blend_(acc, Tensor::zeros({8, 7}, DType::F32), tile, {});
      }),
      error_of([&] {
        Tensor t1 = Tensor::empty(tile.shape(), tile.dtype(), Device::placement_check());
        t1.copy_from(tile);
        ops::tile_blend_(acc, sum, t1, {});
      }),
      error_of([&] { (void)ops::tile_normalize(acc, sum.slice(1, 0, 4), DType::F32); }),
  };
  ops::TilePlacement negative_ramp;
  negative_ramp.ramp = -1;
  messages.push_back(error_of([&] { ops::tile_blend_(acc, sum, tile, negative_ramp); }));
  for (const std::string& m : messages) {
    EXPECT_FALSE(m.empty());
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_NE(messages[0].find("does not fit"), std::string::npos) << messages[0];
  EXPECT_NE(messages[4].find("tensors on cpu and cpu:1 (tile)"), std::string::npos) << messages[4];
}

}  // namespace
}  // namespace fluxrt::test
