#include "ops/vae_ops.h"

#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"

namespace fluxrt::ops {

bool prefers_channels_last(Device device) { return kernels_for(device).group_norm_channels_last != nullptr; }

Tensor to_channels_last(const Tensor& x) {
  detail::check_defined(x, "to_channels_last", "x");
  if (x.is_channels_last()) return x;
  Tensor y = Tensor::empty_channels_last(x.shape(), x.dtype(), x.device());
  y.copy_from(x);
  return y;
}

Tensor group_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, int groups, float eps, bool silu) {
  constexpr const char* kOp = "group_norm";
  detail::check_float(x, kOp, "x");
  FLUXRT_CHECK(x.dim() >= 2 && groups > 0 && x.size(1) % groups == 0, ErrorCode::InvalidArgument,
               "[group_norm] x {} must be [N, C, *] with C divisible by groups = {}", x.shape().str(), groups);
  if (weight.defined()) detail::check_vector(weight, x.size(1), kOp, "weight");
  if (bias.defined()) detail::check_vector(bias, x.size(1), kOp, "bias");
  detail::check_on_device(weight, x.device(), kOp, "weight");
  detail::check_on_device(bias, x.device(), kOp, "bias");
  const auto& k = kernels_for(x);
  if (x.is_channels_last_only()) {
    if (k.group_norm_channels_last == nullptr) {
      note_fallback("group_norm (channels-last)", k);
      return to_channels_last(group_norm(x.contiguous(), weight, bias, groups, eps, silu));
    }
    Tensor y = Tensor::empty_channels_last(x.shape(), x.dtype(), x.device());
    if (x.numel() > 0)
      k.group_norm_channels_last(backend::GroupNormArgs{x, weight, bias, y, groups, eps, silu});
    return y;
  }
  const Tensor xs = detail::contiguous_ready(x);
  Tensor y = detail::empty_like(xs);
  if (x.numel() == 0) return y;
  // The fused SiLU is part of the slot's contract, so there is no partial fallback.
  require_kernel(k.group_norm, kOp, k)(backend::GroupNormArgs{xs, weight, bias, y, groups, eps, silu});
  return y;
}

Tensor upsample_nearest_2x(const Tensor& x) {
  constexpr const char* kOp = "upsample_nearest_2x";
  detail::check_defined(x, kOp, "x");
  FLUXRT_CHECK(x.dim() >= 2, ErrorCode::InvalidArgument,
               "[upsample_nearest_2x] x must be [..., H, W], got {}", x.shape().str());
  Shape shape = x.shape();
  shape[shape.size() - 2] *= 2;
  shape[shape.size() - 1] *= 2;
  const auto& k = kernels_for(x);
  if (x.is_channels_last_only()) {
    Tensor y = Tensor::empty_channels_last(shape, x.dtype(), x.device());
    if (x.numel() == 0) return y;
    if (k.upsample_nearest_2x_channels_last) {
      k.upsample_nearest_2x_channels_last(backend::Upsample2xArgs{x, y});
      return y;
    }
    note_fallback("upsample_nearest_2x (channels-last)", k);
    // y's memory [N, 2H, 2W, C] viewed as [N, H, 2, W, 2, C] receives x's [N, H, W, C] broadcast.
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const Shape s6{N, H, 2, W, 2, C};
    y.permute({0, 2, 3, 1}).view(s6).copy_from(x.permute({0, 2, 3, 1}).unsqueeze(2).unsqueeze(4).expand(s6));
    return y;
  }
  const Tensor xs = detail::contiguous_ready(x);
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  if (x.numel() == 0) return y;
  if (k.upsample_nearest_2x) {
    k.upsample_nearest_2x(backend::Upsample2xArgs{xs, y});
    return y;
  }
  note_fallback(kOp, k);
  // y viewed as [..., H, 2, W, 2] receives x broadcast over both 2s.
  const int nd = x.dim();
  Shape s6;
  for (int i = 0; i < nd - 2; ++i) s6.push_back(x.size(i));
  const int64_t H = x.size(-2), W = x.size(-1);
  for (int64_t v : {H, int64_t{2}, W, int64_t{2}}) s6.push_back(v);
  y.view(s6).copy_from(xs.unsqueeze(nd - 1).unsqueeze(nd + 1).expand(s6));
  return y;
}

Tensor patchify_2x2(const Tensor& x) {
  detail::check_defined(x, "patchify_2x2", "x");
  FLUXRT_CHECK(x.dim() == 4 && x.size(2) % 2 == 0 && x.size(3) % 2 == 0, ErrorCode::InvalidArgument,
               "[patchify_2x2] x must be [B, C, H, W] with even H and W, got {}", x.shape().str());
  const int64_t B = x.size(0), C = x.size(1), h = x.size(2) / 2, w = x.size(3) / 2;
  Tensor y = Tensor::empty({B, C * 4, h, w}, x.dtype(), x.device());
  // [B, C, h, 2, w, 2] -> [B, C, 2(py), 2(px), h, w] -> [B, 4C, h, w]
  const Tensor src = detail::contiguous_ready(x).view({B, C, h, 2, w, 2}).permute({0, 1, 3, 5, 2, 4});
  y.view({B, C, 2, 2, h, w}).copy_from(src);
  return y;
}

Tensor unpatchify_2x2(const Tensor& x) {
  detail::check_defined(x, "unpatchify_2x2", "x");
  FLUXRT_CHECK(x.dim() == 4 && x.size(1) % 4 == 0, ErrorCode::InvalidArgument,
               "[unpatchify_2x2] x must be [B, 4C, h, w], got {}", x.shape().str());
  const int64_t B = x.size(0), C = x.size(1) / 4, h = x.size(2), w = x.size(3);
  Tensor y = Tensor::empty({B, C, 2 * h, 2 * w}, x.dtype(), x.device());
  // [B, C, 2(py), 2(px), h, w] -> [B, C, h, py, w, px]
  const Tensor src = detail::contiguous_ready(x).view({B, C, 2, 2, h, w}).permute({0, 1, 4, 2, 5, 3});
  y.view({B, C, h, 2, w, 2}).copy_from(src);
  return y;
}

namespace {
Tensor channel_norm(const Tensor& x, const Tensor& mean, const Tensor& var, float eps, bool inverse,
                    const char* op) {
  detail::check_float(x, op, "x");
  FLUXRT_CHECK(x.dim() >= 2, ErrorCode::InvalidArgument, "[{}] x must be [B, C, *], got {}", op, x.shape().str());
  detail::check_vector(mean, x.size(1), op, "running_mean");
  detail::check_vector(var, x.size(1), op, "running_var");
  detail::check_on_device(mean, x.device(), op, "running_mean");
  detail::check_on_device(var, x.device(), op, "running_var");
  const Tensor xs = detail::contiguous_ready(x);
  Tensor y = detail::empty_like(xs);
  if (x.numel() == 0) return y;
  const auto& k = kernels_for(x);
  require_kernel(k.channel_norm, op, k)(backend::ChannelNormArgs{xs, mean, var, y, eps, inverse});
  return y;
}
}  // namespace

Tensor latent_normalize(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, float eps) {
  return channel_norm(x, running_mean, running_var, eps, false, "latent_normalize");
}
Tensor latent_denormalize(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, float eps) {
  return channel_norm(x, running_mean, running_var, eps, true, "latent_denormalize");
}

}  // namespace fluxrt::ops
