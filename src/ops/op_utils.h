#pragma once
// Validation and layout helpers shared by the op front ends (not part of the public ops API).
#include <string_view>

#include "core/error.h"
#include "core/tensor.h"

namespace fluxrt::ops::detail {

inline bool is_kernel_float(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }

inline void check_defined(const Tensor& t, std::string_view op, std::string_view name) {
  FLUXRT_CHECK(t.defined(), ErrorCode::InvalidArgument, "[{}] {} is undefined", op, name);
}

// Storage dtypes the kernels take for activations: f32, bf16, f16.
inline void check_float(const Tensor& t, std::string_view op, std::string_view name) {
  check_defined(t, op, name);
  FLUXRT_CHECK(is_kernel_float(t.dtype()), ErrorCode::Unsupported, "[{}] {} has dtype {}; expected f32, bf16 or f16",
               op, name, dtype_name(t.dtype()));
}

inline void check_same_device(const Tensor& a, const Tensor& b, std::string_view op) {
  FLUXRT_CHECK(a.device() == b.device(), ErrorCode::InvalidArgument, "[{}] tensors on {} and {}", op,
               a.device().str(), b.device().str());
}

// A parameter or side input (weight, table, mask) must live where the op runs (`device`, the
// input's). Undefined tensors pass. Same message as check_same_device plus the tensor's role, so a
// run on the placement-check device cpu:1 names what was left behind.
inline void check_on_device(const Tensor& t, Device device, std::string_view op, std::string_view name) {
  FLUXRT_CHECK(!t.defined() || t.device() == device, ErrorCode::InvalidArgument, "[{}] tensors on {} and {} ({})",
               op, device.str(), t.device().str(), name);
}

// The kernels' stride contract: last dim stride 1 (leading dims free). Copies otherwise.
inline Tensor rows_ready(const Tensor& t) {
  if (t.dim() == 0) return t.reshape({1});
  if (t.stride(-1) == 1 || t.size(-1) == 1) return t;
  return t.contiguous();
}

inline Tensor contiguous_ready(const Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

// A 1-D parameter vector of length n (any float dtype, any stride).
inline void check_vector(const Tensor& t, int64_t n, std::string_view op, std::string_view name) {
  check_defined(t, op, name);
  FLUXRT_CHECK(t.dim() == 1 && t.size(0) == n && dtype_is_float(t.dtype()), ErrorCode::InvalidArgument,
               "[{}] {} must be a float [{}] vector, got {}", op, name, n, t.str());
}

inline Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

// A weight or bias for a prepare step on `device` (cuda:N keeps N: the backend prepares on the
// device of what it is given, never on an implicit cuda:0). Between the host devices (cpu and the
// placement-check cpu:N) a contiguous tensor is relabelled without a copy, since their memory is
// the same host memory; anything else is copied (an upload to a GPU).
inline Tensor place_parameter(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return t;
  if (t.device().is_cpu() && device.is_cpu() && t.is_contiguous()) return t.host_view_on(device);
  Tensor placed = Tensor::empty(t.shape(), t.dtype(), device);
  placed.copy_from(t);
  return placed;
}

}  // namespace fluxrt::ops::detail
