#pragma once
// fp8 single files (flux1-dev-fp8.safetensors and the like, ComfyUI's "scaled fp8",
// compressed-tensors files): their float8_e4m3fn / float8_e5m2 weights kept in their bytes, so
// the resident transformer is the file's size rather than twice it in bf16.
#include "models/weight_binder.h"

namespace fluxrt::models {

// `raw` with every 2-D fp8 tensor turned into a quantized entry (QuantType::F8E4M3 / F8E5M2, a
// view of the file's bytes) carrying its scale, if any: `<layer>.scale_weight` (ComfyUI) or
// `<layer>.weight_scale` (compressed-tensors), per tensor or per row (other shapes: Unsupported
// naming the tensor). Linears compute with such an entry directly; a dense read gives
// bf16(f32(w8) * scale) (core/quant.h scaled_weight), the rule the checkpoints' references use.
// Other fp8 tensors (1-D norm scales, biases) become that bf16 dequantization. Dropped:
// `<layer>.input_scale` / `.scale_input` (activations are not fp8 here) and the `scaled_fp8`
// marker. A weight scale without its fp8 weight stays, so the binder reports it as unused.
// Returns `raw` itself (same views) when it holds no fp8 tensor.
TensorStore fp8_weights_quantized(const TensorStore& raw);

}  // namespace fluxrt::models
