#pragma once
// Maps a flat row number of a tensor viewed as [rows, D] (all leading dims flattened, last dim
// stride 1 or 0) to the element offset of that row, for any strides of the leading dims. Shared
// by the ref and CPU kernels; header-only so it costs nothing per call beyond a few divisions.
#include <cstdint>

#include "core/tensor.h"

namespace fluxrt::backend {

class RowIndex {
 public:
  explicit RowIndex(const Tensor& t) : lead_(t.dim() > 0 ? t.dim() - 1 : 0) {
    for (int i = 0; i < lead_; ++i) {
      extent_[i] = t.size(i);
      stride_[i] = t.stride(i);
    }
    cols_ = t.dim() > 0 ? t.size(-1) : 1;
    col_stride_ = t.dim() > 0 ? t.stride(-1) : 1;
    rows_ = cols_ == 0 ? t.numel() : t.numel() / cols_;
    if (cols_ == 0) {
      rows_ = 1;
      for (int i = 0; i < lead_; ++i) rows_ *= extent_[i];
    }
  }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t col_stride() const { return col_stride_; }
  // Element offset (from the tensor's data pointer) of the first element of row r.
  int64_t offset(int64_t r) const {
    int64_t off = 0;
    for (int i = lead_ - 1; i >= 0; --i) {
      const int64_t e = extent_[i];
      off += (r % e) * stride_[i];
      r /= e;
    }
    return off;
  }

 private:
  int lead_;
  int64_t extent_[kMaxDims] = {};
  int64_t stride_[kMaxDims] = {};
  int64_t rows_ = 0, cols_ = 0, col_stride_ = 1;
};

}  // namespace fluxrt::backend
