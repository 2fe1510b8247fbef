#pragma once
// Pieces the FLUX.1 and FLUX.2 transformers share (flux-reference.md 2.1, 2.4): the sinusoidal
// timestep/guidance embedding with the reference's dtype chain, the RoPE tables and host->device
// copies (the shared blocks: flux_blocks.h).
#include <cstdint>
#include <span>

#include "core/device.h"
#include "core/tensor.h"

namespace fluxrt::models {

// diffusers Timesteps(channels, flip_sin_to_cos=True, downscale_freq_shift=0) on `values` [B]
// (sigma or the guidance scale, any float dtype) after the model's `value.to(dtype) * 1000`,
// which in bf16 rounds twice (3.5 -> 3504). Returns [B, channels] (cos half first) rounded to
// `dtype`, on the host.
Tensor flux_sinusoidal_embedding(const Tensor& values, int64_t channels, DType dtype);

// The tensor itself on the CPU, else a copy on `device`.
Tensor flux_to_device(const Tensor& host, Device device);

// The host-built inputs of a transformer forward, uploaded to `device` (the transformers'
// forward_on_device reads only tensors, so a step can be recorded and replayed):
// flux_sinusoidal_embedding of `values` (on any device) as [B, channels] on `device` ...
Tensor flux_timestep_projection(const Tensor& values, int64_t channels, DType dtype, Device device);
// ... and the RoPE tables over [text ; image] positions (diffusers concatenates the two tables,
// text first), [(B,) Lt + Li, head_dim / 2] on `device`; the ids are read on the host (small).
struct FluxRope {
  Tensor cos, sin;
};
FluxRope flux_rope_tables(const Tensor& x_ids, const Tensor& ctx_ids, std::span<const int64_t> axes_dim, double theta,
                          Device device);

}  // namespace fluxrt::models
