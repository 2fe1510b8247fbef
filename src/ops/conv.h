#pragma once
// 2-D convolution for the VAEs (NCHW, PyTorch Conv2d semantics, groups = 1, dilation 1).
//
//   auto conv = ops::prepare_conv2d(w, b);                              // once, at load
//   Tensor h = ops::conv2d(x, *conv, Conv2dOptions::same(3));           // 3x3, pad 1
//   Tensor d = ops::conv2d(x, *down, Conv2dOptions::downsample());      // stride 2, pad (0,1,0,1)
//   Tensor u = ops::conv2d(x, *up, Conv2dOptions::upsample_then_same(3)); // nearest 2x, then 3x3
#include <memory>

#include "backend/args/conv.h"
#include "core/tensor.h"

namespace fluxrt::ops {

// The prepared (repacked / uploaded) weight of a convolution; models hold it through this name.
using PreparedConv2d = backend::PreparedConv2d;

struct Conv2dOptions {
  int stride = 1;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  bool upsample_nearest_2x = false;  // nearest 2x of x first (VAE decoder Upsample)

  // Symmetric padding k/2 ("same" for odd k at stride 1).
  static Conv2dOptions same(int kernel) {
    Conv2dOptions o;
    o.pad_top = o.pad_bottom = o.pad_left = o.pad_right = kernel / 2;
    return o;
  }
  // The FLUX VAE encoder downsampler: zero-pad right and bottom by 1, 3x3 stride 2.
  static Conv2dOptions downsample() {
    Conv2dOptions o;
    o.stride = 2;
    o.pad_bottom = o.pad_right = 1;
    return o;
  }
  static Conv2dOptions upsample_then_same(int kernel) {
    Conv2dOptions o = same(kernel);
    o.upsample_nearest_2x = true;
    return o;
  }
};

// weight [Cout, Cin, KH, KW], bias [Cout] or undefined; placed on `device` (as prepare_linear does)
// and prepared for its backend.
std::shared_ptr<backend::PreparedConv2d> prepare_conv2d(const Tensor& weight, const Tensor& bias = Tensor(),
                                                        Device device = Device::cpu());

// The output shape [N, Cout, Ho, Wo] for x [N, Cin, H, W].
Shape conv2d_output_shape(const Tensor& x, const backend::PreparedConv2d& w, const Conv2dOptions& opt);

// An uninitialised output for conv2d(x, w, opt): x's dtype, and channels-last when x is.
Tensor empty_conv2d_output(const Tensor& x, const backend::PreparedConv2d& w, const Conv2dOptions& opt);

// y = conv(x) + bias (+ residual when defined, same shape as y); y in x's dtype and layout
// (channels-last x, channels-last y: see ops/vae_ops.h).
Tensor conv2d(const Tensor& x, const backend::PreparedConv2d& w, const Conv2dOptions& opt = {},
              const Tensor& residual = Tensor());
void conv2d_into(const Tensor& x, const backend::PreparedConv2d& w, const Conv2dOptions& opt, const Tensor& y,
                 const Tensor& residual = Tensor());

}  // namespace fluxrt::ops
