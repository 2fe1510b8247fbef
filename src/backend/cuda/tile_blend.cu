// Tile blending for the VAE's tiled passes on the device, so the tiles never leave the GPU: one
// thread per tile element adds (wy * wx) * tile into the f32 accumulator (the threads of the
// first plane also add wy * wx into the weight sum), then one thread per output element divides
// by the sum and rounds to the output dtype. __fmul_rn / __fadd_rn / __fdiv_rn keep nvcc from
// contracting into FMAs, so every value has the CPU kernel's bits (args/tile_blend.h's order).
#include "backend/cuda/device_math.cuh"
#include "backend/tile_ramp.h"

namespace fluxrt::cuda::kern {
namespace {

__global__ void tile_blend_kernel(TileBlendParams p) {
  const int64_t per_plane = p.tile_h * p.tile_w, total = p.planes * per_plane;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t plane = e / per_plane, i = (e % per_plane) / p.tile_w, j = e % p.tile_w;
    const float wy = backend::tile_ramp_weight(i, p.tile_h, p.ramp, p.ramp_top, p.ramp_bottom);
    const float wx = backend::tile_ramp_weight(j, p.tile_w, p.ramp, p.ramp_left, p.ramp_right);
    const float w = __fmul_rn(wy, wx);
    const int64_t pixel = (p.top + i) * p.W + p.left + j;
    float* d = p.acc + plane * p.H * p.W + pixel;
    *d = __fadd_rn(*d, __fmul_rn(w, load_f(p.tile, p.tile_dtype, e)));
    if (plane == 0) p.weight_sum[pixel] = __fadd_rn(p.weight_sum[pixel], w);
  }
}

__global__ void tile_normalize_kernel(const float* acc, const float* weight_sum, void* out, DT out_dtype,
                                      int64_t total, int64_t hw) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x)
    store_f(out, out_dtype, e, __fdiv_rn(acc[e], weight_sum[e % hw]));
}

}  // namespace

cudaError_t launch_tile_blend(const TileBlendParams& p, cudaStream_t stream, int sm_count) {
  const int64_t total = p.planes * p.tile_h * p.tile_w;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  tile_blend_kernel<<<grid_for(total, threads, sm_count), threads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_tile_normalize(const float* acc, const float* weight_sum, void* out, DType out_dtype,
                                  int64_t planes, int64_t hw, cudaStream_t stream, int sm_count) {
  const int64_t total = planes * hw;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  tile_normalize_kernel<<<grid_for(total, threads, sm_count), threads, 0, stream>>>(acc, weight_sum, out, out_dtype,
                                                                                     total, hw);
  return cudaGetLastError();
}

}  // namespace fluxrt::cuda::kern
