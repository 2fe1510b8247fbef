#pragma once
// The same weights a quantized model was loaded from, dense: every quantized entry of `store`
// dequantized to f32 (the reference decode, bit-identical to the gguf package's), the rest
// widened to f32. Models built from it are what the quantized ones must compute.
#include "core/quant.h"
#include "models/weight_binder.h"

namespace fluxrt::test {

inline models::TensorStore dequantized_store(const models::TensorStore& store) {
  models::TensorStore dense;
  dense.set_description(store.description() + " (dequantized)");
  for (const std::string& name : store.names()) {
    if (const QuantizedMatrix* q = store.quantized(name))
      dense.add(name, dequantize_ref(*q), store.origin(name));
    else
      dense.add(name, store.get(name).to(DType::F32), store.origin(name));
  }
  return dense;
}

}  // namespace fluxrt::test
