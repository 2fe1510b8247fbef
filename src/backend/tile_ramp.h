#pragma once
// The weight of sample i of a blended tile along one axis (AutoencoderKL's tiled passes, the
// tile_blend ops): linear ramps of `ramp` samples on the sides that have a neighbouring tile,
// (i + 0.5) / ramp so every weight stays positive, 1 elsewhere. Shared by the CPU and CUDA kernels
// (plain C++, no includes, so nvcc compiles it too), written as float operations with one rounding
// each so both get the same bits; the ref kernel, the oracle, evaluates the same formula in f64.
#include <cstdint>

#if defined(__CUDACC__)
#define FLUXRT_HOST_DEVICE __host__ __device__
#else
#define FLUXRT_HOST_DEVICE
#endif

namespace fluxrt::backend {

FLUXRT_HOST_DEVICE inline float tile_ramp_weight(int64_t i, int64_t len, int64_t ramp, bool ramp_before,
                                                 bool ramp_after) {
  float v = 1.0f;
  if (ramp <= 0) return v;
  const float r = static_cast<float>(ramp);
  if (ramp_before && i < ramp) {
    const float up = (static_cast<float>(i) + 0.5f) / r;
    v = up < v ? up : v;
  }
  if (ramp_after && len - 1 - i < ramp) {
    const float down = (static_cast<float>(len - 1 - i) + 0.5f) / r;
    v = down < v ? down : v;
  }
  return v;
}

}  // namespace fluxrt::backend
