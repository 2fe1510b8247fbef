#include "support/quantized_weight.h"

#include "core/error.h"

namespace fluxrt::test {

QuantizedMatrix quantize_weight(QuantType type, const Tensor& weight) {
  FLUXRT_CHECK(weight.dim() == 2 && weight.dtype() == DType::F32 && weight.is_contiguous(),
               ErrorCode::InvalidArgument, "quantize_weight: a contiguous f32 [rows, cols], got {} {}",
               weight.shape().str(), dtype_name(weight.dtype()));
  QuantizedMatrix q;
  q.type = type;
  q.rows = weight.size(0);
  q.cols = weight.size(1);
  q.bytes = Tensor::empty({static_cast<int64_t>(q.rows * quant_row_bytes(type, q.cols))}, DType::U8);
  for (int64_t r = 0; r < q.rows; ++r)
    quantize_row_ref(type, weight.data<float>() + r * q.cols, q.bytes.data<uint8_t>() + r * q.row_bytes(),
                     q.cols);
  return q;
}

}  // namespace fluxrt::test
