#include "backend/ref/conv_ref.h"

#include <vector>

namespace fluxrt::backend {

std::shared_ptr<PreparedConv2d> prepare_conv2d_ref(const Tensor& weight, const Tensor& bias) {
  auto p = std::make_shared<PreparedConv2d>();
  p->weight = weight;
  p->bias = bias;
  return p;
}

void conv2d_ref(const Conv2dArgs& a) {
  // Logical-order f32 copies (exact widening); the oracle does not care about strides.
  const std::vector<float> x = a.x.to_vector();
  const std::vector<float> w = a.w->weight.to_vector();
  std::vector<float> bias;
  if (a.w->bias.defined()) bias = a.w->bias.to_vector();
  std::vector<float> res;
  if (a.residual.defined()) res = a.residual.to_vector();

  const int64_t nb = a.x.size(0), cin = a.x.size(1);
  const int64_t up = a.upsample_nearest_2x ? 2 : 1;
  const int64_t hin = a.x.size(2) * up, win = a.x.size(3) * up;  // after the upsample
  const int64_t cout = a.w->weight.size(0), kh = a.w->weight.size(2), kw = a.w->weight.size(3);
  const int64_t ho = a.y.size(2), wo = a.y.size(3);
  const int64_t xh = a.x.size(2), xw = a.x.size(3);

  std::vector<double> out(static_cast<size_t>(nb * cout * ho * wo));
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t n = 0; n < nb; ++n) {
    for (int64_t co = 0; co < cout; ++co) {
      for (int64_t oy = 0; oy < ho; ++oy) {
        for (int64_t ox = 0; ox < wo; ++ox) {
          double acc = bias.empty() ? 0.0 : bias[co];
          for (int64_t ci = 0; ci < cin; ++ci) {
            for (int64_t ky = 0; ky < kh; ++ky) {
              const int64_t iy = oy * a.stride + ky - a.pad_top;
              if (iy < 0 || iy >= hin) continue;
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t ix = ox * a.stride + kx - a.pad_left;
                if (ix < 0 || ix >= win) continue;
                const float xv = x[((n * cin + ci) * xh + iy / up) * xw + ix / up];
                acc += static_cast<double>(xv) * w[((co * cin + ci) * kh + ky) * kw + kx];
              }
            }
          }
          const size_t o = static_cast<size_t>(((n * cout + co) * ho + oy) * wo + ox);
          if (!res.empty()) acc += res[o];
          out[o] = acc;
        }
      }
    }
  }
  // Write through y's strides (it may be a view).
  const size_t ye = a.y.element_size();
  char* base = static_cast<char*>(a.y.raw_data());
  for (int64_t n = 0; n < nb; ++n)
    for (int64_t co = 0; co < cout; ++co)
      for (int64_t oy = 0; oy < ho; ++oy)
        for (int64_t ox = 0; ox < wo; ++ox) {
          const int64_t off = n * a.y.stride(0) + co * a.y.stride(1) + oy * a.y.stride(2) + ox * a.y.stride(3);
          convert(&out[static_cast<size_t>(((n * cout + co) * ho + oy) * wo + ox)], DType::F64,
                  base + off * ye, a.y.dtype(), 1);
        }
}

}  // namespace fluxrt::backend
