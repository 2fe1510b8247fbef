#pragma once
// Convolutions of the VAE's memory-lean exact pass (TilingMode::Lean): the output is computed in
// horizontal bands of rows, each band reading only the input rows it needs (a halo of k/2 rows,
// or the nearest-2x upsample of just those rows), so the backend's working copies (oneDNN's
// blocked input/output, the upsampled input) are band-sized instead of image-sized, while every
// output pixel sees exactly the input the whole-image convolution gives it.
#include <cstdint>

#include "core/tensor.h"
#include "ops/conv.h"

namespace fluxrt::models {

// y = conv(x) (+ residual) into the preallocated whole-image y [N, Cout, Ho, Wo], `band_rows` output
// rows at a time (<= 0 or >= Ho: one call on the whole image). residual may alias y (the resnet's
// in-place skip): each band reads its residual rows before writing them.
void conv2d_banded(const Tensor& x, const ops::PreparedConv2d& w, const ops::Conv2dOptions& opt,
                   const Tensor& y, const Tensor& residual, int64_t band_rows);

// The same, allocating y in x's dtype.
Tensor conv2d_banded(const Tensor& x, const ops::PreparedConv2d& w, const ops::Conv2dOptions& opt,
                     int64_t band_rows);

// Output rows per band so that one band of the widest side (max(cin, cout) channels of `width`
// output pixels, batch `batch`, counted as f32) is about `band_bytes`; at least 1.
int64_t band_rows_for(int64_t cin, int64_t cout, int64_t width, int64_t batch, size_t band_bytes);

}  // namespace fluxrt::models
