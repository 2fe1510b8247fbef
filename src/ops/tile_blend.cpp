#include "ops/tile_blend.h"

#include "core/error.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace fluxrt::ops {
namespace {

void check_accumulators(const Tensor& acc, const Tensor& weight_sum, const char* op) {
  detail::check_defined(acc, op, "acc");
  detail::check_defined(weight_sum, op, "weight_sum");
  FLUXRT_CHECK(acc.dim() == 4 && acc.dtype() == DType::F32 && acc.is_contiguous(), ErrorCode::InvalidArgument,
               "[{}] acc must be a contiguous f32 [B, C, H, W], got {}", op, acc.str());
  FLUXRT_CHECK(weight_sum.dtype() == DType::F32 && weight_sum.is_contiguous() &&
                   weight_sum.shape() == Shape({acc.size(2), acc.size(3)}),
               ErrorCode::InvalidArgument, "[{}] weight_sum must be a contiguous f32 [{}, {}], got {}", op,
               acc.size(2), acc.size(3), weight_sum.str());
  detail::check_on_device(weight_sum, acc.device(), op, "weight_sum");
}

}  // namespace

void tile_blend_(const Tensor& acc, const Tensor& weight_sum, const Tensor& tile, const TilePlacement& at) {
  check_accumulators(acc, weight_sum, "tile_blend");
  detail::check_float(tile, "tile_blend", "tile");
  detail::check_on_device(tile, acc.device(), "tile_blend", "tile");
  FLUXRT_CHECK(tile.dim() == 4 && tile.size(0) == acc.size(0) && tile.size(1) == acc.size(1),
               ErrorCode::InvalidArgument, "[tile_blend] tile {} does not match acc {} in batch and channels",
               tile.shape().str(), acc.shape().str());
  FLUXRT_CHECK(at.top >= 0 && at.left >= 0 && at.top + tile.size(2) <= acc.size(2) &&
                   at.left + tile.size(3) <= acc.size(3) && at.ramp >= 0,
               ErrorCode::InvalidArgument, "[tile_blend] tile {} at ({}, {}) ramp {} does not fit in acc {}",
               tile.shape().str(), at.top, at.left, at.ramp, acc.shape().str());
  backend::TileBlendArgs args;
  args.tile = detail::contiguous_ready(tile);
  args.acc = acc;
  args.weight_sum = weight_sum;
  args.top = at.top;
  args.left = at.left;
  args.ramp = at.ramp;
  args.ramp_top = at.ramp_top;
  args.ramp_bottom = at.ramp_bottom;
  args.ramp_left = at.ramp_left;
  args.ramp_right = at.ramp_right;
  const auto& k = kernels_for(acc);
  auto kernel = require_kernel(k.tile_blend, "tile_blend", k);
  if (tile.numel() == 0) return;
  kernel(args);
}

Tensor tile_normalize(const Tensor& acc, const Tensor& weight_sum, DType dtype) {
  check_accumulators(acc, weight_sum, "tile_normalize");
  FLUXRT_CHECK(detail::is_kernel_float(dtype), ErrorCode::Unsupported,
               "[tile_normalize] output dtype {}; expected f32, bf16 or f16", dtype_name(dtype));
  backend::TileNormalizeArgs args;
  args.acc = acc;
  args.weight_sum = weight_sum;
  args.out = Tensor::empty(acc.shape(), dtype, acc.device());
  const auto& k = kernels_for(acc);
  auto kernel = require_kernel(k.tile_normalize, "tile_normalize", k);
  if (acc.numel() > 0) kernel(args);
  return args.out;
}

}  // namespace fluxrt::ops
