#pragma once
// Embedding tables kept in their quantized bytes (GGUF text encoders quantize token_embd too:
// Qwen3-4B's is 151936 x 2560, 0.78 GB in bf16 against 0.22 GB at Q4_K). A lookup dequantizes only
// the rows the prompt uses, so the table never widens.
#include "core/quant.h"
#include "core/tensor.h"

namespace fluxrt::models {

// Rows of `table` [V, D] picked by `ids` (i32/i64 on the host, any shape) -> [*ids.shape, D] in
// `out_dtype` on the host: each row dequantized in f32 and rounded once, as a dense lookup of
// the f32 dequantization would give. Ids outside [0, V) are an InvalidArgument naming the first.
Tensor quantized_embedding(const QuantizedMatrix& table, const Tensor& ids, DType out_dtype);

}  // namespace fluxrt::models
