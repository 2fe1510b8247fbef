#include "models/vae/banded_conv.h"

#include <algorithm>

#include "core/error.h"
#include "ops/vae_ops.h"

namespace fluxrt::models {

void conv2d_banded(const Tensor& x, const ops::PreparedConv2d& w, const ops::Conv2dOptions& opt,
                   const Tensor& y, const Tensor& residual, int64_t band_rows) {
  const Shape out = ops::conv2d_output_shape(x, w, opt);
  FLUXRT_CHECK(y.shape() == out, ErrorCode::InvalidArgument, "[conv2d banded] y {} should be {}", y.shape().str(),
               out.str());
  const int64_t ho = out[2];
  if (band_rows <= 0 || band_rows >= ho) {
    ops::conv2d_into(x, w, opt, y, residual);
    return;
  }
  // Rows of one image of a channels-last batch are one dense block; rows of all images are not,
  // and a backend would copy them into one first: band each image on its own.
  if (x.size(0) > 1 && x.is_channels_last_only()) {
    for (int64_t b = 0; b < x.size(0); ++b)
      conv2d_banded(x.narrow(0, b, 1), w, opt, y.narrow(0, b, 1),
                    residual.defined() ? residual.narrow(0, b, 1) : Tensor(), band_rows);
    return;
  }
  const int64_t k = w.weight.size(2), stride = opt.stride;
  const int64_t up = opt.upsample_nearest_2x ? 2 : 1;
  const int64_t in_rows = x.size(2) * up;  // rows of the (upsampled) input the kernel slides over
  for (int64_t o0 = 0; o0 < ho; o0 += band_rows) {
    const int64_t o1 = std::min(ho, o0 + band_rows);
    // Input rows [lo, hi) of the padded-coordinates window of output rows [o0, o1); what falls
    // outside the image becomes this band's own zero padding, exactly as the whole-image pass pads.
    int64_t lo = o0 * stride - opt.pad_top, hi = (o1 - 1) * stride - opt.pad_top + k;
    ops::Conv2dOptions band = opt;
    band.pad_top = static_cast<int>(std::max<int64_t>(0, -lo));
    band.pad_bottom = static_cast<int>(std::max<int64_t>(0, hi - in_rows));
    lo = std::max<int64_t>(lo, 0);
    hi = std::min(hi, in_rows);
    Tensor xb;
    if (opt.upsample_nearest_2x) {
      // Upsample only the source rows this band reads, then crop to [lo, hi) (a 1-row offset when
      // lo is odd): the same values the whole-image upsample would give these rows.
      const int64_t src_lo = lo / 2, src_hi = (hi + 1) / 2;
      const Tensor upsampled = ops::upsample_nearest_2x(x.slice(2, src_lo, src_hi));  // [N, C, 2(src_hi - src_lo), 2W]
      xb = upsampled.slice(2, lo - 2 * src_lo, hi - 2 * src_lo);                     // [N, C, hi - lo, 2W]
      band.upsample_nearest_2x = false;
    } else {
      xb = x.slice(2, lo, hi);                                                        // [N, C, hi - lo, W]
    }
    ops::conv2d_into(xb, w, band, y.slice(2, o0, o1), residual.defined() ? residual.slice(2, o0, o1) : Tensor());
  }
}

Tensor conv2d_banded(const Tensor& x, const ops::PreparedConv2d& w, const ops::Conv2dOptions& opt,
                     int64_t band_rows) {
  Tensor y = ops::empty_conv2d_output(x, w, opt);
  conv2d_banded(x, w, opt, y, Tensor(), band_rows);
  return y;
}

int64_t band_rows_for(int64_t cin, int64_t cout, int64_t width, int64_t batch, size_t band_bytes) {
  const int64_t row_bytes = std::max<int64_t>(cin, cout) * std::max<int64_t>(width, 1) * std::max<int64_t>(batch, 1) * 4;
  return std::max<int64_t>(1, static_cast<int64_t>(band_bytes) / row_bytes);
}

}  // namespace fluxrt::models
