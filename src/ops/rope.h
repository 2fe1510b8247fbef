#pragma once
// RoPE tables: cos/sin [L, D/2] in f32 (or [B, L, D/2] for per-batch ids), consumed by attention
// (backend/args/attention.h), which rotates q and k while reading them.
#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace fluxrt::ops {

struct RopeTable {
  Tensor cos;  // [L, D/2] or [B, L, D/2] f32
  Tensor sin;
  bool defined() const { return cos.defined(); }
};

// FLUX multi-axis RoPE, adjacent-pair layout (flux-reference.md 2.1). ids [L, A] or [B, L, A] of
// any numeric dtype; axes_dim sums to the head dim D. Axis a owns a contiguous range of n_a/2
// table entries with its own ladder w_j = theta^(-2j/n_a); angle = ids[l, a] * w_j. Computed in
// float64 and rounded to f32 as diffusers' FluxPosEmbed / Flux2PosEmbed do.
RopeTable rope_flux(const Tensor& ids, std::span<const int64_t> axes_dim, double theta);

inline constexpr int64_t kFlux1RopeAxes[] = {16, 56, 56};
inline constexpr double kFlux1RopeTheta = 10000.0;
inline constexpr int64_t kFlux2RopeAxes[] = {32, 32, 32, 32};
inline constexpr double kFlux2RopeTheta = 2000.0;

inline RopeTable rope_flux1(const Tensor& ids) { return rope_flux(ids, kFlux1RopeAxes, kFlux1RopeTheta); }
inline RopeTable rope_flux2(const Tensor& ids) { return rope_flux(ids, kFlux2RopeAxes, kFlux2RopeTheta); }

// 1-D rotate-half RoPE (Qwen3 / Llama / NeoX) for positions start .. start+length-1: entry j has
// inv_freq_j = theta^(-2j/D). Computed in f32 exactly as transformers' Qwen3RotaryEmbedding does
// (f32 inv_freq, f32 angle = inv_freq * pos, cos/sin of that f32 angle); transformers then rounds
// cos/sin to the model dtype, which callers may do for bit-level similarity (we keep f32).
inline constexpr double kQwen3RopeTheta = 1e6;
RopeTable rope_rotate_half(int64_t length, int64_t head_dim, double theta = kQwen3RopeTheta, int64_t start = 0);

}  // namespace fluxrt::ops
