#pragma once
// Argument structs for the VAE's non-convolution ops, NCHW in PyTorch order. These tensors are
// contiguous (the ops layer copies otherwise): every op here walks whole channel planes. The
// *_channels_last slots take the same structs with x and y channels-last instead.
#include "core/tensor.h"

namespace fluxrt::backend {

// GroupNorm over [N, C, H, W] with G groups (C % G == 0), affine per channel, statistics over
// (C/G, H, W) in f32; optionally followed by SiLU in the same pass (every VAE resnet norm is).
struct GroupNormArgs {
  Tensor x;       // [N, C, H, W] contiguous (any rank >= 2 works: [N, C, *])
  Tensor weight;  // [C] or undefined
  Tensor bias;    // [C] or undefined
  Tensor y;       // same shape, contiguous; may be x itself
  int groups = 32;
  float eps = 1e-6f;
  bool silu = false;
};

// Nearest-neighbour 2x upsampling: y[n, c, i, j] = x[n, c, i / 2, j / 2].
struct Upsample2xArgs {
  Tensor x;  // [N, C, H, W] contiguous
  Tensor y;  // [N, C, 2H, 2W] contiguous
};

// Per-channel affine normalisation of latents with BatchNorm running statistics (FLUX.2 AE):
// forward y = (x - mean[c]) / sqrt(var[c] + eps); inverse y = x * sqrt(var[c] + eps) + mean[c].
struct ChannelNormArgs {
  Tensor x;     // [N, C, H, W] contiguous (any rank >= 2: [N, C, *])
  Tensor mean;  // [C] any float dtype
  Tensor var;   // [C] any float dtype
  Tensor y;     // same shape, contiguous; may be x itself
  float eps = 1e-4f;
  bool inverse = false;
};

}  // namespace fluxrt::backend
