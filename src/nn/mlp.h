#pragma once
// The feed-forward blocks of the models: x -> out(act(in(x))), plain or gated.
#include "core/tensor.h"
#include "nn/linear.h"

namespace fluxrt::nn {

enum class MlpKind {
  GeluTanh,       // gelu_tanh(in x), the GELU fused into the GEMM epilogue (FLUX.1)
  QuickGelu,      // quick_gelu(in x) (CLIP)
  SwiGlu,         // silu(a) * b (FLUX.2, Qwen3)
  GatedGeluTanh,  // gelu_tanh(a) * b (T5 v1.1 gated-gelu)
};

// Gated kinds take (a, b) either from one fused projection `in` [2M, D] (a's rows first: FLUX.2's
// linear_in, T5's wi_0 and wi_1 stacked at load) or from two, `in` = a [M, D] and `up` = b [M, D]
// (Qwen3's gate_proj and up_proj).
struct Mlp {
  explicit Mlp(MlpKind kind = MlpKind::GeluTanh) : kind(kind) {}

  MlpKind kind;
  Linear in;   // [M, D], or [2M, D] for a fused gated projection
  Linear up;   // [M, D], gated kinds with separate projections only
  Linear out;  // [D, M]; FLUX fuses it into its gated residual instead of calling operator()

  /// The activations before `out`: x [..., D] -> [..., M].
  Tensor hidden(const Tensor& x) const;
  /// The activation alone, for an input projection computed elsewhere (FLUX.2 single blocks take
  /// it from linear1's columns): pre [..., M] (plain) or [..., 2M] (gated, a first) -> [..., M].
  Tensor activate(const Tensor& pre) const;
  /// hidden() and activate() into a preallocated out [..., M] of x's dtype (unit column stride,
  /// any row stride: the MLP columns of a FLUX single block's [attention ; MLP] buffer).
  void hidden_into(const Tensor& x, const Tensor& out) const;
  void activate_into(const Tensor& pre, const Tensor& out) const;
  /// out(hidden(x)): [..., D] -> [..., D].
  Tensor operator()(const Tensor& x) const;
};

}  // namespace fluxrt::nn
