// CPU tile blending: plain scalar f32 loops over whole rows (memory-bound, once per tile; the
// compiler vectorises them without contracting the multiply-add, so the bits are the ones of
// args/tile_blend.h's formula). Planes in parallel: every element is written by one thread.
#include "backend/cpu/cpu_tile_blend.h"

#include <vector>

#include "backend/tile_ramp.h"
#include "core/dtype.h"

namespace fluxrt::backend::cpu {
namespace {

// Below this many elements a parallel region costs more than the loop (tiny test tiles; on a
// shared box idle OpenMP threads spinning for cores made such calls 100x slower).
constexpr int64_t kParallelMinElements = int64_t{1} << 16;

std::vector<float> ramp_weights(int64_t len, int64_t ramp, bool before, bool after) {
  std::vector<float> w(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) w[i] = tile_ramp_weight(i, len, ramp, before, after);
  return w;
}

}  // namespace

void tile_blend(const TileBlendArgs& a) {
  const int64_t planes = a.tile.size(0) * a.tile.size(1), th = a.tile.size(2), tw = a.tile.size(3);
  const int64_t H = a.acc.size(2), W = a.acc.size(3);
  const std::vector<float> wy = ramp_weights(th, a.ramp, a.ramp_top, a.ramp_bottom);
  const std::vector<float> wx = ramp_weights(tw, a.ramp, a.ramp_left, a.ramp_right);
  const char* tile = static_cast<const char*>(a.tile.raw_data());
  const int64_t es = static_cast<int64_t>(a.tile.element_size());
  const DType dt = a.tile.dtype();
  float* acc = a.acc.data<float>();
#pragma omp parallel if (planes * th * tw >= kParallelMinElements)
  {
    std::vector<float> row(static_cast<size_t>(tw));
#pragma omp for schedule(static)
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < th; ++i) {
        convert(tile + (p * th + i) * tw * es, dt, row.data(), DType::F32, static_cast<size_t>(tw));
        float* d = acc + (p * H + a.top + i) * W + a.left;
        for (int64_t j = 0; j < tw; ++j) d[j] += wy[i] * wx[j] * row[j];
      }
  }
  float* sum = a.weight_sum.data<float>();
  for (int64_t i = 0; i < th; ++i) {
    float* s = sum + (a.top + i) * W + a.left;
    for (int64_t j = 0; j < tw; ++j) s[j] += wy[i] * wx[j];
  }
}

void tile_normalize(const TileNormalizeArgs& a) {
  const int64_t HW = a.weight_sum.numel(), planes = a.acc.numel() / (HW > 0 ? HW : 1);
  const float* acc = a.acc.data<float>();
  const float* sum = a.weight_sum.data<float>();
  char* out = static_cast<char*>(a.out.raw_data());
  const int64_t es = static_cast<int64_t>(a.out.element_size());
  const DType dt = a.out.dtype();
#pragma omp parallel if (planes * HW >= kParallelMinElements)
  {
    std::vector<float> q(static_cast<size_t>(HW));
#pragma omp for schedule(static)
    for (int64_t p = 0; p < planes; ++p) {
      const float* src = acc + p * HW;
      for (int64_t i = 0; i < HW; ++i) q[i] = src[i] / sum[i];
      convert(q.data(), DType::F32, out + p * HW * es, dt, static_cast<size_t>(HW));
    }
  }
}

}  // namespace fluxrt::backend::cpu
