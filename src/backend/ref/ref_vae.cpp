// Reference VAE kernels on contiguous NCHW tensors.
#include <cmath>

#include "backend/ref/ref_access.h"
#include "backend/ref/ref_ops.h"

namespace fluxrt::backend::ref {

void group_norm(const GroupNormArgs& a) {
  const int64_t N = a.x.size(0), C = a.x.size(1);
  const int64_t hw = a.x.numel() / std::max<int64_t>(N * C, 1);
  const int64_t G = a.groups, cg = C / G, n_per = cg * hw;
  const void* xp = a.x.raw_data();
  void* yp = a.y.raw_data();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t base = (n * C + g * cg) * hw;
      double s = 0;
      for (int64_t i = 0; i < n_per; ++i) s += load(xp, a.x.dtype(), base + i);
      const double mean = s / static_cast<double>(n_per);
      double v = 0;
      for (int64_t i = 0; i < n_per; ++i) {
        const double d = load(xp, a.x.dtype(), base + i) - mean;
        v += d * d;
      }
      const double inv = 1.0 / std::sqrt(v / static_cast<double>(n_per) + static_cast<double>(a.eps));
      for (int64_t c = 0; c < cg; ++c) {
        const int64_t ch = g * cg + c;
        const double w = a.weight.defined() ? load(a.weight.raw_data(), a.weight.dtype(), ch * a.weight.stride(0)) : 1.0;
        const double b = a.bias.defined() ? load(a.bias.raw_data(), a.bias.dtype(), ch * a.bias.stride(0)) : 0.0;
        for (int64_t i = 0; i < hw; ++i) {
          const int64_t off = base + c * hw + i;
          double y = (load(xp, a.x.dtype(), off) - mean) * inv * w + b;
          if (a.silu) y = y / (1.0 + std::exp(-y));
          store(yp, a.y.dtype(), off, y);
        }
      }
    }
}

void upsample_nearest_2x(const Upsample2xArgs& a) {
  const int64_t planes = a.x.numel() / (a.x.size(-1) * a.x.size(-2));
  const int64_t H = a.x.size(-2), W = a.x.size(-1);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < 2 * H; ++i)
      for (int64_t j = 0; j < 2 * W; ++j)
        store(a.y.raw_data(), a.y.dtype(), (p * 2 * H + i) * 2 * W + j,
              load(a.x.raw_data(), a.x.dtype(), (p * H + i / 2) * W + j / 2));
}

void channel_norm(const ChannelNormArgs& a) {
  const int64_t N = a.x.size(0), C = a.x.size(1);
  const int64_t hw = a.x.numel() / std::max<int64_t>(N * C, 1);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const double mean = load(a.mean.raw_data(), a.mean.dtype(), c * a.mean.stride(0));
      const double var = load(a.var.raw_data(), a.var.dtype(), c * a.var.stride(0));
      const double sd = std::sqrt(var + static_cast<double>(a.eps));
      for (int64_t i = 0; i < hw; ++i) {
        const int64_t off = (n * C + c) * hw + i;
        const double x = load(a.x.raw_data(), a.x.dtype(), off);
        store(a.y.raw_data(), a.y.dtype(), off, a.inverse ? x * sd + mean : (x - mean) / sd);
      }
    }
}

}  // namespace fluxrt::backend::ref
