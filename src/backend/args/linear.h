#pragma once
// GEMM / linear: y[M, N] = act(x[M, K] @ W[N, K]^T + bias[N]), PyTorch Linear layout.
// Weights stay in their checkpoint dtype and are prepared once per model (packing, reorders),
// never per call.
#include <memory>

#include "core/quant.h"
#include "core/tensor.h"

namespace fluxrt::backend {

enum class Activation { None, GeluTanh, Silu };

// How a model asks for its weights to be held and multiplied, whatever dtype they come in.
//  - Native: as they are (a dense weight in its dtype, quantized blocks in their bytes); what the
//    backend does with them is its choice (packing, reorders, FLUXRT_LINEAR_IMPL on the CPU).
//  - Int8: W8A8, int8 weights requantized per output row at prepare and per-token int8
//    activations at each call (precision int8: the transformer's linears; docs/quantization.md).
//    Only backends with an int8 GEMM have it (KernelTable::prepare_linear_int8); ops refuses it
//    elsewhere rather than running bf16 under that name.
// A choice per weight, passed down at prepare: the components of one pipeline load on several
// threads, so it cannot be a process- or thread-wide switch.
enum class LinearFormat { Native, Int8 };

// A weight prepared by one backend. `weight` is the original [N, K] tensor (often a zero-copy view
// into the checkpoint mapping); `state` is whatever the backend built from it.
struct PreparedLinear {
  Tensor weight;                 // [N, K]
  Tensor bias;                   // [N] or undefined
  std::shared_ptr<void> state;   // backend-specific (packed weight, primitive cache, ...)
  // Set when the weight is kept in its quantized bytes (GGUF blocks, fp8; core/quant.h): then
  // `weight` is a zero-memory stand-in of the same [N, K] shape, unless the backend dequantized
  // it (the ref backend holds it as f32, a GPU as bf16).
  std::shared_ptr<const QuantizedMatrix> quantized;
  // The device it was prepared for (set by ops::prepare_linear): inputs must be on it. `weight`
  // and `bias` live there too (ops::prepare_linear places them before the backend prepares).
  Device device;
  int64_t out_features() const { return weight.size(0); }
  int64_t in_features() const { return weight.size(1); }
};

struct LinearArgs {
  Tensor x;                          // [M, K], rows may be strided (stride(0) >= K), stride(1) == 1
  const PreparedLinear* w = nullptr; // weight [N, K] and optional bias [N]
  Activation activation = Activation::None;
  Tensor y;                          // [M, N] preallocated, same dtype as x; stride(1) == 1
  // When set, y = residual + gate * act(...), fused into the epilogue (FLUX gated residual):
  // residual [M, N] (may alias y), gate [N] broadcast over rows.
  Tensor residual;
  Tensor gate;
};

// `a` restricted to output columns [n0, n0 + n): y, and a gated call's residual and gate, sliced
// along; x and the weight unchanged. For backends that run one weight as several column groups.
inline LinearArgs column_slice(const LinearArgs& a, int64_t n0, int64_t n) {
  LinearArgs s = a;
  s.y = a.y.slice(1, n0, n0 + n);
  if (a.residual.defined()) s.residual = a.residual.slice(1, n0, n0 + n);
  if (a.gate.defined()) s.gate = a.gate.reshape({a.gate.numel()}).slice(0, n0, n0 + n);
  return s;
}

}  // namespace fluxrt::backend
