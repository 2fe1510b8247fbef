#pragma once
// Reference 2-D convolution (NCHW, PyTorch cross-correlation), f64 accumulation, rounded once to
// the output dtype. The nearest 2x upsample is applied by index (x[i / 2]) before padding.
#include <memory>

#include "backend/args/conv.h"

namespace fluxrt::backend {

std::shared_ptr<PreparedConv2d> prepare_conv2d_ref(const Tensor& weight, const Tensor& bias);
void conv2d_ref(const Conv2dArgs& args);

}  // namespace fluxrt::backend
