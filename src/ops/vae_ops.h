#pragma once
// VAE ops on NCHW tensors (PyTorch order). Inputs of any strides are copied to contiguous first,
// except channels-last ones (Tensor::is_channels_last): GroupNorm and the upsampling keep that
// layout, as conv2d does, so a VAE run channels-last stays in it from end to end.
#include "core/device.h"
#include "core/tensor.h"

namespace fluxrt::ops {

// Whether the VAE on `device` should keep its activations channels-last: the backend has the
// channels-last GroupNorm, and its convolutions read and write that layout as they are (oneDNN's
// fastest CPU convolutions do; NCHW costs a reorder into it and back around each of them).
bool prefers_channels_last(Device device);
// x [N, C, H, W] as a channels-last tensor of the same shape and values (x itself when it is one).
Tensor to_channels_last(const Tensor& x);

// GroupNorm(groups, eps, affine) over [N, C, H, W] (or [N, C, *]); with silu = true the SiLU that
// follows every VAE resnet norm runs in the same pass. y is channels-last when x is.
Tensor group_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, int groups = 32, float eps = 1e-6f,
                  bool silu = false);

// Nearest-neighbour 2x upsampling [N, C, H, W] -> [N, C, 2H, 2W] (a broadcast copy); y is
// channels-last when x is.
Tensor upsample_nearest_2x(const Tensor& x);

// FLUX.2 AE 2x2 patchify: [B, C, H, W] -> [B, 4C, H/2, W/2], output channel c*4 + py*2 + px holds
// x[b, c, 2i + py, 2j + px] (diffusers _patchify_latents). unpatchify_2x2 is the exact inverse.
Tensor patchify_2x2(const Tensor& x);
Tensor unpatchify_2x2(const Tensor& x);

// BatchNorm-statistics latent normalisation (FLUX.2 AE, eps 1e-4): per channel c of [B, C, H, W],
// normalize: (x - mean[c]) / sqrt(var[c] + eps); denormalize: x * sqrt(var[c] + eps) + mean[c].
Tensor latent_normalize(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, float eps = 1e-4f);
Tensor latent_denormalize(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                          float eps = 1e-4f);

}  // namespace fluxrt::ops
