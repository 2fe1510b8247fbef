#include "ops/rope.h"

#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace fluxrt::ops {

RopeTable rope_flux(const Tensor& ids, std::span<const int64_t> axes_dim, double theta) {
  FLUXRT_CHECK(ids.defined() && (ids.dim() == 2 || ids.dim() == 3), ErrorCode::InvalidArgument,
               "[rope] ids must be [L, A] or [B, L, A], got {}", ids.defined() ? ids.shape().str() : "undefined");
  const int64_t A = ids.size(-1);
  FLUXRT_CHECK(static_cast<int64_t>(axes_dim.size()) == A, ErrorCode::InvalidArgument,
               "[rope] ids have {} axes but axes_dim lists {}", A, axes_dim.size());
  for (int64_t n : axes_dim)
    FLUXRT_CHECK(n > 0 && n % 2 == 0, ErrorCode::InvalidArgument, "[rope] axis size {} must be even and positive", n);
  const int64_t D = std::accumulate(axes_dim.begin(), axes_dim.end(), int64_t{0});
  const int64_t half = D / 2;
  const int64_t rows = ids.numel() / A;
  // Ids through f64: integer positions (and the bf16/f32 ids diffusers uses) are exact.
  const Tensor id64 = ids.contiguous().to(DType::F64);
  const double* idp = id64.data<double>();

  // Per-entry axis and frequency, as diffusers' get_1d_rotary_pos_embed: 1 / theta^(2j/n) in f64.
  std::vector<int64_t> axis_of(half);
  std::vector<double> freq(half);
  for (int64_t a = 0, e = 0; a < A; ++a)
    for (int64_t j = 0; j < axes_dim[a] / 2; ++j, ++e) {
      axis_of[e] = a;
      freq[e] = 1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(axes_dim[a]));
    }

  Shape shape = ids.shape();
  shape[shape.size() - 1] = half;
  RopeTable t{Tensor::empty(shape, DType::F32), Tensor::empty(shape, DType::F32)};
  float* c = t.cos.data<float>();
  float* s = t.sin.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < half; ++e) {
      const double angle = idp[r * A + axis_of[e]] * freq[e];
      c[r * half + e] = static_cast<float>(std::cos(angle));
      s[r * half + e] = static_cast<float>(std::sin(angle));
    }
  return t;
}

RopeTable rope_rotate_half(int64_t length, int64_t head_dim, double theta, int64_t start) {
  FLUXRT_CHECK(length >= 0 && head_dim > 0 && head_dim % 2 == 0, ErrorCode::InvalidArgument,
               "[rope] rotate-half table needs length >= 0 and an even head dim, got {} and {}", length, head_dim);
  const int64_t half = head_dim / 2;
  std::vector<float> inv_freq(half);
  for (int64_t j = 0; j < half; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    inv_freq[j] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  RopeTable t{Tensor::empty({length, half}, DType::F32), Tensor::empty({length, half}, DType::F32)};
  float* c = t.cos.data<float>();
  float* s = t.sin.data<float>();
  for (int64_t l = 0; l < length; ++l)
    for (int64_t j = 0; j < half; ++j) {
      const float angle = inv_freq[j] * static_cast<float>(start + l);
      c[l * half + j] = static_cast<float>(std::cos(static_cast<double>(angle)));
      s[l * half + j] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  return t;
}

}  // namespace fluxrt::ops
