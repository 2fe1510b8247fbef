#pragma once
// Element access for the reference kernels: read any numeric dtype as f64, write f64 to any float
// dtype with ONE rounding (f64 -> f32 by round-to-odd, then f32 -> half by round-to-nearest-even,
// which equals a direct correctly rounded f64 -> half conversion because f32 keeps > 2 extra bits).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace fluxrt::backend::ref {

inline double load(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::F64: return static_cast<const double*>(base)[i];
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::F8E4M3: return f8e4m3_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::F8E5M2: return f8e5m2_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::I32: return static_cast<const int32_t*>(base)[i];
    case DType::I16: return static_cast<const int16_t*>(base)[i];
    case DType::I8: return static_cast<const int8_t*>(base)[i];
    case DType::U8:
    case DType::Bool: return static_cast<const uint8_t*>(base)[i];
  }
  return 0;
}

// f64 -> f32 rounding to odd: exact values stay, inexact ones truncate and set the last bit.
inline float to_f32_round_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1u;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline void store(void* base, DType dt, int64_t i, double v) {
  switch (dt) {
    case DType::F64: static_cast<double*>(base)[i] = v; return;
    case DType::F32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::F16: static_cast<uint16_t*>(base)[i] = f32_to_f16(to_f32_round_odd(v)); return;
    case DType::BF16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(to_f32_round_odd(v)); return;
    default: fail(ErrorCode::Unsupported, "[ref] cannot store to {}", dtype_name(dt));
  }
}

// A [rows, D] view of one tensor argument: value(r, c) / set(r, c, v) for any strides.
class RowAccess {
 public:
  explicit RowAccess(const Tensor& t) : t_(t), base_(t.defined() ? t.raw_data() : nullptr) {
    const int n = t.dim();
    for (int i = 0; i + 1 < n; ++i) {
      extent_[lead_] = t.size(i);
      stride_[lead_++] = t.stride(i);
    }
    col_stride_ = n ? t.stride(-1) : 1;
  }
  int64_t offset(int64_t r, int64_t c) const {
    if (r != cached_row_) {  // rows are walked in order: decompose each row number once
      int64_t off = 0, q = r;
      for (int i = lead_ - 1; i >= 0; --i) {
        off += (q % extent_[i]) * stride_[i];
        q /= extent_[i];
      }
      cached_row_ = r;
      cached_off_ = off;
    }
    return cached_off_ + c * col_stride_;
  }
  double get(int64_t r, int64_t c) const { return load(base_, t_.dtype(), offset(r, c)); }
  void set(int64_t r, int64_t c, double v) const { store(base_, t_.dtype(), offset(r, c), v); }

 private:
  const Tensor& t_;
  void* base_;
  int lead_ = 0;
  int64_t extent_[kMaxDims] = {}, stride_[kMaxDims] = {};
  int64_t col_stride_ = 1;
  mutable int64_t cached_row_ = -1, cached_off_ = 0;
};

inline int64_t rows_of(const Tensor& t) { return t.dim() == 0 ? 1 : t.numel() / std::max<int64_t>(t.size(-1), 1); }
inline int64_t cols_of(const Tensor& t) { return t.dim() == 0 ? 1 : t.size(-1); }

}  // namespace fluxrt::backend::ref
