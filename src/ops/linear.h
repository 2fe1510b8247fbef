#pragma once
// Linear layers (PyTorch nn.Linear semantics, y = x @ W^T + b) on any backend: validate, allocate
// the output, call the device's kernel table. Weights are prepared once per model with
// prepare_linear (the backend packs or reorders them there) and reused for every call.
//
//   auto qkv = ops::prepare_linear(w_qkv, Tensor(), Device::cpu());   // once, at load
//   Tensor y = ops::linear(x, *qkv);                                   // [..., K] -> [..., N]
//   ops::linear_gated_residual_into(h, *proj, gate, x, x);            // x += gate * proj(h)
#include <memory>

#include "backend/args/linear.h"
#include "core/tensor.h"

namespace fluxrt::ops {

using backend::Activation;
using backend::LinearFormat;
// The prepared (packed / uploaded) weight of a linear; models hold it through this name.
using PreparedLinear = backend::PreparedLinear;

// weight [N, K] (kept in its dtype; bf16 checkpoints stay bf16), bias [N] or undefined.
// The result belongs to the backend of `device` and must be used with tensors on that device; the
// weight and bias are placed there first (uploaded to a GPU, relabelled between host devices), so
// PreparedLinear::weight lives on `device`. LinearFormat::Int8 prepares it as W8A8 (its
// PreparedLinear::weight stays the source, which LoRA merges per request read); Unsupported on a
// backend without int8 linears.
std::shared_ptr<backend::PreparedLinear> prepare_linear(const Tensor& weight, const Tensor& bias = Tensor(),
                                                        Device device = Device::cpu(),
                                                        LinearFormat format = LinearFormat::Native);

// A weight kept in its quantized bytes (core/quant.h: GGUF blocks, fp8 with its scale), bias [N]
// or undefined. Backends with a quantized path keep the bytes (CPU: dequantized a block of rows at
// a time inside the GEMM; ref: dequantized whole, it is the oracle); on the others (CUDA) the
// weight is dequantized to bf16 here and prepared as a dense weight on `device`. The bytes stay
// on the host either way. LinearFormat::Int8 requantizes Q8_0 and fp8 weights to W8A8 (their
// blocks are then dropped) and keeps the smaller types as above; Unsupported where the backend
// has no int8 linears.
std::shared_ptr<backend::PreparedLinear> prepare_linear_quantized(const QuantizedMatrix& weight,
                                                                  const Tensor& bias = Tensor(),
                                                                  Device device = Device::cpu(),
                                                                  LinearFormat format = LinearFormat::Native);

// y[..., N] = act(x[..., K] @ W^T + b), y in x's dtype. x may have any leading dims and strided
// rows (a 2-D x with stride(0) >= K is used without a copy).
Tensor linear(const Tensor& x, const backend::PreparedLinear& w, Activation act = Activation::None);
// The same into a preallocated y [..., N] (2-D y may have strided rows).
void linear_into(const Tensor& x, const backend::PreparedLinear& w, const Tensor& y,
                 Activation act = Activation::None);

// FLUX gated residual, fused into the GEMM epilogue: y = residual + gate[N] * act(x @ W^T + b).
// residual [..., N] may be y itself (in place: x += gate * layer(h)).
Tensor linear_gated_residual(const Tensor& x, const backend::PreparedLinear& w, const Tensor& gate,
                             const Tensor& residual, Activation act = Activation::None);
void linear_gated_residual_into(const Tensor& x, const backend::PreparedLinear& w, const Tensor& gate,
                                const Tensor& residual, const Tensor& y, Activation act = Activation::None);

}  // namespace fluxrt::ops
