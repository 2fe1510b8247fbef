// Reference tile blending: the ramp weights, products and sums in f64, each stored value rounded
// once to f32 (the accumulator and weight sum are f32 tensors) or to the output dtype.
#include "backend/ref/ref_tile_blend.h"

#include <algorithm>
#include <vector>

#include "core/dtype.h"

namespace fluxrt::backend::ref {
namespace {

std::vector<double> ramp_weights(int64_t len, int64_t ramp, bool before, bool after) {
  std::vector<double> w(static_cast<size_t>(len), 1.0);
  for (int64_t i = 0; i < len && ramp > 0; ++i) {
    if (before && i < ramp) w[i] = std::min(w[i], (static_cast<double>(i) + 0.5) / static_cast<double>(ramp));
    if (after && len - 1 - i < ramp)
      w[i] = std::min(w[i], (static_cast<double>(len - 1 - i) + 0.5) / static_cast<double>(ramp));
  }
  return w;
}

double read(const Tensor& t, int64_t i) {
  double v = 0;
  convert(static_cast<const char*>(t.raw_data()) + i * static_cast<int64_t>(t.element_size()), t.dtype(), &v,
          DType::F64, 1);
  return v;
}

}  // namespace

void tile_blend(const TileBlendArgs& a) {
  const int64_t planes = a.tile.size(0) * a.tile.size(1), th = a.tile.size(2), tw = a.tile.size(3);
  const int64_t H = a.acc.size(2), W = a.acc.size(3);
  const auto wy = ramp_weights(th, a.ramp, a.ramp_top, a.ramp_bottom);
  const auto wx = ramp_weights(tw, a.ramp, a.ramp_left, a.ramp_right);
  float* acc = a.acc.data<float>();
  float* sum = a.weight_sum.data<float>();
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < th; ++i)
      for (int64_t j = 0; j < tw; ++j) {
        float& d = acc[(p * H + a.top + i) * W + a.left + j];
        d = static_cast<float>(static_cast<double>(d) + wy[i] * wx[j] * read(a.tile, (p * th + i) * tw + j));
      }
  for (int64_t i = 0; i < th; ++i)
    for (int64_t j = 0; j < tw; ++j) {
      float& s = sum[(a.top + i) * W + a.left + j];
      s = static_cast<float>(static_cast<double>(s) + wy[i] * wx[j]);
    }
}

void tile_normalize(const TileNormalizeArgs& a) {
  const int64_t HW = a.weight_sum.numel(), n = a.acc.numel();
  const float* acc = a.acc.data<float>();
  const float* sum = a.weight_sum.data<float>();
  char* out = static_cast<char*>(a.out.raw_data());
  const int64_t es = static_cast<int64_t>(a.out.element_size());
  for (int64_t i = 0; i < n; ++i) {
    const double q = static_cast<double>(acc[i]) / static_cast<double>(sum[i % HW]);
    convert(&q, DType::F64, out + i * es, a.out.dtype(), 1);
  }
}

}  // namespace fluxrt::backend::ref
