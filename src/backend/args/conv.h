#pragma once
// 2D convolution for the VAEs (oneDNN on CPU, cuDNN on CUDA), NCHW in PyTorch order.
#include <memory>

#include "core/tensor.h"

namespace fluxrt::backend {

struct PreparedConv2d {
  Tensor weight;  // [Cout, Cin, KH, KW]
  Tensor bias;    // [Cout] or undefined
  std::shared_ptr<void> state;
  Device device;  // the device it was prepared for (set by ops::prepare_conv2d): inputs must be on it
};

struct Conv2dArgs {
  Tensor x;                          // [N, Cin, H, W]
  const PreparedConv2d* w = nullptr;
  int stride = 1;
  // Explicit padding; the FLUX VAE downsampler pads (0, 1, 0, 1) = right and bottom only.
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  // Nearest 2x upsampling of x folded into the convolution's input indexing (VAE decoder);
  // the output is then [N, Cout, 2H', 2W'] for stride 1.
  bool upsample_nearest_2x = false;
  Tensor residual;                   // optional [N, Cout, Ho, Wo] added to the output
  Tensor y;                          // [N, Cout, Ho, Wo] preallocated
};

}  // namespace fluxrt::backend
