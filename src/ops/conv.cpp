#include "ops/conv.h"

#include "core/error.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace fluxrt::ops {
namespace {

bool is_conv_dtype(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }

}  // namespace

std::shared_ptr<backend::PreparedConv2d> prepare_conv2d(const Tensor& weight, const Tensor& bias, Device device) {
  FLUXRT_CHECK(weight.defined() && weight.dim() == 4, ErrorCode::InvalidArgument,
               "[conv2d] weight must be [Cout, Cin, KH, KW], got {}",
               weight.defined() ? weight.shape().str() : "undefined");
  FLUXRT_CHECK(is_conv_dtype(weight.dtype()), ErrorCode::Unsupported, "[conv2d] weight dtype {} is not f32/bf16/f16",
               dtype_name(weight.dtype()));
  if (bias.defined())
    FLUXRT_CHECK(bias.numel() == weight.size(0), ErrorCode::InvalidArgument,
                 "[conv2d] bias {} does not match Cout = {}", bias.shape().str(), weight.size(0));
  const auto& table = kernels_for(device);
  const Tensor w = detail::place_parameter(weight, device);
  const Tensor b = detail::place_parameter(bias.defined() ? bias.reshape({weight.size(0)}) : bias, device);
  std::shared_ptr<backend::PreparedConv2d> p;
  if (table.prepare_conv2d) {
    p = table.prepare_conv2d(w, b);
  } else {
    p = std::make_shared<backend::PreparedConv2d>();
    p->weight = w;
    p->bias = b;
  }
  p->device = device;
  return p;
}

Shape conv2d_output_shape(const Tensor& x, const backend::PreparedConv2d& w, const Conv2dOptions& o) {
  FLUXRT_CHECK(x.defined() && x.dim() == 4, ErrorCode::InvalidArgument, "[conv2d] x must be [N, C, H, W], got {}",
               x.defined() ? x.shape().str() : "undefined");
  FLUXRT_CHECK(x.size(1) == w.weight.size(1), ErrorCode::InvalidArgument,
               "[conv2d] x {} has {} channels but the weight {} expects {}", x.shape().str(), x.size(1),
               w.weight.shape().str(), w.weight.size(1));
  FLUXRT_CHECK(o.stride >= 1 && o.pad_top >= 0 && o.pad_bottom >= 0 && o.pad_left >= 0 && o.pad_right >= 0,
               ErrorCode::InvalidArgument, "[conv2d] stride must be >= 1 and padding >= 0");
  const int64_t up = o.upsample_nearest_2x ? 2 : 1;
  const int64_t h = x.size(2) * up + o.pad_top + o.pad_bottom, wd = x.size(3) * up + o.pad_left + o.pad_right;
  const int64_t kh = w.weight.size(2), kw = w.weight.size(3);
  FLUXRT_CHECK(h >= kh && wd >= kw, ErrorCode::InvalidArgument,
               "[conv2d] padded input {}x{} is smaller than the {}x{} kernel", h, wd, kh, kw);
  return Shape{x.size(0), w.weight.size(0), (h - kh) / o.stride + 1, (wd - kw) / o.stride + 1};
}

void conv2d_into(const Tensor& x, const backend::PreparedConv2d& w, const Conv2dOptions& o, const Tensor& y,
                 const Tensor& residual) {
  const Shape out = conv2d_output_shape(x, w, o);
  FLUXRT_CHECK(is_conv_dtype(x.dtype()) && is_conv_dtype(y.dtype()), ErrorCode::Unsupported,
               "[conv2d] x/y dtypes {}/{} are not f32/bf16/f16", dtype_name(x.dtype()), dtype_name(y.dtype()));
  FLUXRT_CHECK(y.shape() == out, ErrorCode::InvalidArgument, "[conv2d] y {} should be {}", y.shape().str(),
               out.str());
  if (residual.defined())
    FLUXRT_CHECK(residual.shape() == out, ErrorCode::InvalidArgument, "[conv2d] residual {} should be {}",
                 residual.shape().str(), out.str());
  FLUXRT_CHECK(x.device() == w.device, ErrorCode::InvalidArgument, "[conv2d] tensors on {} and {} (x, weight)",
               x.device().str(), w.device.str());
  detail::check_on_device(y, x.device(), "conv2d", "y");
  detail::check_on_device(residual, x.device(), "conv2d", "residual");
  backend::Conv2dArgs a;
  a.x = x;
  a.w = &w;
  a.stride = o.stride;
  a.pad_top = o.pad_top;
  a.pad_bottom = o.pad_bottom;
  a.pad_left = o.pad_left;
  a.pad_right = o.pad_right;
  a.upsample_nearest_2x = o.upsample_nearest_2x;
  a.residual = residual;
  a.y = y;
  const auto& table = kernels_for(x);
  require_kernel(table.conv2d, "conv2d", table)(a);
}

Tensor empty_conv2d_output(const Tensor& x, const backend::PreparedConv2d& w, const Conv2dOptions& o) {
  return Tensor::empty_like_layout(x, conv2d_output_shape(x, w, o), x.dtype());
}

Tensor conv2d(const Tensor& x, const backend::PreparedConv2d& w, const Conv2dOptions& o, const Tensor& residual) {
  Tensor y = empty_conv2d_output(x, w, o);
  conv2d_into(x, w, o, y, residual);
  return y;
}

}  // namespace fluxrt::ops
