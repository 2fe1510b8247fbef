#include "models/quantized_embedding.h"

#include <vector>

#include "core/error.h"

namespace fluxrt::models {

Tensor quantized_embedding(const QuantizedMatrix& table, const Tensor& ids, DType out_dtype) {
  FLUXRT_CHECK(ids.defined() && (ids.dtype() == DType::I32 || ids.dtype() == DType::I64),
               ErrorCode::InvalidArgument, "[embedding] ids must be i32 or i64, got {}",
               ids.defined() ? ids.str() : std::string("undefined"));
  FLUXRT_CHECK(ids.device().is_cpu(), ErrorCode::InvalidArgument,
               "[embedding] quantized table: ids must be on the host");
  const Tensor flat = ids.contiguous().reshape({ids.numel()});
  const int64_t n = flat.numel(), V = table.rows, D = table.cols;
  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor rows = Tensor::empty({n, D}, DType::F32);  // [n, D]
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = flat.dtype() == DType::I64 ? flat.data<int64_t>()[i] : flat.data<int32_t>()[i];
    FLUXRT_CHECK(id >= 0 && id < V, ErrorCode::InvalidArgument,
                 "[embedding] id {} at position {} is outside the table's {} rows", id, i, V);
    dequantize_rows_ref(table, id, 1, rows.data<float>() + i * D, D);
  }
  return rows.to(out_dtype).view(out_shape);  // [*ids.shape, D]
}

}  // namespace fluxrt::models
