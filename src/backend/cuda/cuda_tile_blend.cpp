// The tile blending slots of the CUDA table (tile_blend.cu): the ops layer has validated shapes,
// dtypes and devices; this maps the tensors to plain launch parameters on their device's stream.
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"

namespace fluxrt::cuda {
namespace {

void tile_blend(const backend::TileBlendArgs& a) {
  require_on_device(a.tile, "tile_blend", "tile");
  require_on_device(a.acc, "tile_blend", "acc");
  require_on_device(a.weight_sum, "tile_blend", "weight_sum");
  DeviceContext& ctx = context_of(a.acc);
  kern::TileBlendParams p;
  p.tile = a.tile.raw_data();
  p.tile_dtype = a.tile.dtype();
  p.acc = a.acc.data<float>();
  p.weight_sum = a.weight_sum.data<float>();
  p.planes = a.tile.size(0) * a.tile.size(1);
  p.tile_h = a.tile.size(2);
  p.tile_w = a.tile.size(3);
  p.H = a.acc.size(2);
  p.W = a.acc.size(3);
  p.top = a.top;
  p.left = a.left;
  p.ramp = a.ramp;
  p.ramp_top = a.ramp_top;
  p.ramp_bottom = a.ramp_bottom;
  p.ramp_left = a.ramp_left;
  p.ramp_right = a.ramp_right;
  FLUXRT_CUDA_CHECK(kern::launch_tile_blend(p, ctx.stream(), ctx.sm_count), "tile_blend");
}

void tile_normalize(const backend::TileNormalizeArgs& a) {
  require_on_device(a.acc, "tile_normalize", "acc");
  require_on_device(a.weight_sum, "tile_normalize", "weight_sum");
  require_on_device(a.out, "tile_normalize", "out");
  DeviceContext& ctx = context_of(a.out);
  const int64_t hw = a.weight_sum.numel();
  FLUXRT_CUDA_CHECK(kern::launch_tile_normalize(
                        a.acc.data<float>(), a.weight_sum.data<float>(), a.out.raw_data(), a.out.dtype(),
                        hw == 0 ? 0 : a.acc.numel() / hw, hw, ctx.stream(), ctx.sm_count),
                    "tile_normalize");
}

}  // namespace

void fill_tile_blend(backend::KernelTable& t) {
  t.tile_blend = tile_blend;
  t.tile_normalize = tile_normalize;
}

}  // namespace fluxrt::cuda
