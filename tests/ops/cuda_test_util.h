#pragma once
// Helpers of the CUDA GPU tests: moving tensors to and from device 0, mirroring a host view onto
// the device with the same view operations (so strided layouts are exercised on both sides), and
// skipping when no GPU is present.
#include <gtest/gtest.h>

#include <functional>

#include "backend/cuda_backend.h"
#include "core/tensor.h"

namespace fluxrt::test {

#define FLUXRT_REQUIRE_GPU()                                                          \
  do {                                                                                \
    if (!::fluxrt::cuda::built_with_cuda() || ::fluxrt::cuda::device_count() == 0)    \
      GTEST_SKIP() << "no CUDA device";                                               \
  } while (0)

inline Tensor to_cuda(const Tensor& host) {
  if (!host.defined()) return host;
  Tensor d = Tensor::empty(host.shape(), host.dtype(), Device::cuda(0));
  d.copy_from(host);
  return d;
}

inline Tensor to_host(const Tensor& dev) {
  if (!dev.defined()) return dev;
  Tensor h = Tensor::empty(dev.shape(), dev.dtype());
  h.copy_from(dev);
  return h;
}

// A test input: a contiguous base tensor and the view the op receives (identity by default).
struct Input {
  Tensor base;
  std::function<Tensor(const Tensor&)> view = [](const Tensor& t) { return t; };
  Tensor host() const { return base.defined() ? view(base) : Tensor(); }
  Tensor device() const { return base.defined() ? view(to_cuda(base)) : Tensor(); }
};

}  // namespace fluxrt::test
