#include "models/flux/flux_common.h"

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "models/weight_binder.h"
#include "ops/elementwise.h"
#include "ops/rope.h"

namespace fluxrt::models {

Tensor flux_sinusoidal_embedding(const Tensor& values, int64_t channels, DType dtype) {
  const Tensor v = to_device(values, Device::cpu()).to(DType::F32).contiguous();  // read on the host
  const int64_t b = v.numel(), half = channels / 2;
  std::vector<float> emb(static_cast<size_t>(b * 2 * half));
  const float neg_log = static_cast<float>(-std::log(10000.0));
  for (int64_t i = 0; i < b; ++i) {
    // value.to(dtype) * 1000 in the model dtype.
    float u = v.data<float>()[i];
    if (dtype == DType::BF16) u = bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(u)) * 1000.0f));
    else u = u * 1000.0f;
    for (int64_t k = 0; k < half; ++k) {
      // exponent = -log(10000) * arange(half) / half (f32), freq = exp(exponent), arg = u * freq.
      const float exponent = neg_log * static_cast<float>(k) / static_cast<float>(half);
      const float arg = u * std::exp(exponent);
      emb[static_cast<size_t>(i * 2 * half + k)] = std::cos(arg);  // flip_sin_to_cos: cos first
      emb[static_cast<size_t>(i * 2 * half + half + k)] = std::sin(arg);
    }
  }
  return Tensor::from_vector(emb, {b, 2 * half}, dtype);
}

Tensor flux_to_device(const Tensor& host, Device device) {
  return to_device(host, device);
}

Tensor flux_timestep_projection(const Tensor& values, int64_t channels, DType dtype, Device device) {
  return to_device(flux_sinusoidal_embedding(to_device(values, Device::cpu()), channels, dtype), device);
}

FluxRope flux_rope_tables(const Tensor& x_ids, const Tensor& ctx_ids, std::span<const int64_t> axes_dim, double theta,
                          Device device) {
  const Tensor ids = ops::concat({to_device(ctx_ids, Device::cpu()).to(DType::F32), to_device(x_ids, Device::cpu()).to(DType::F32)},
                                 ctx_ids.dim() - 2);  // [(B,) L, axes]
  const ops::RopeTable rope = ops::rope_flux(ids, axes_dim, theta);  // [(B,) L, d/2]
  return FluxRope{to_device(rope.cos, device), to_device(rope.sin, device)};
}

}  // namespace fluxrt::models
