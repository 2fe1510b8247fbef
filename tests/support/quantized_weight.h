#pragma once
// A dense weight quantized to a GGUF type the way a file writer would (core/quant.h's reference
// quantizer, row by row), for the tests of the quantized and int8 linears.
#include "core/quant.h"
#include "core/tensor.h"

namespace fluxrt::test {

// weight [rows, cols] in f32 (rows of whole blocks of `type`).
QuantizedMatrix quantize_weight(QuantType type, const Tensor& weight);

}  // namespace fluxrt::test
