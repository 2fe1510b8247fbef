// Row reductions (softmax, LayerNorm, RMSNorm, AdaLN modulate) and GroupNorm(+SiLU).
// Rows of up to 2048 columns get one warp each (FLUX's per-head QK norm has 128-wide rows, ~10^5
// of them); longer rows one 256-thread block. Statistics in f32 with two passes over the row
// (mean, then squared deviations: the row is in L1/L2 for the second read), one rounding at the
// store. GroupNorm splits each group over kGroupNormSplits blocks and merges their (count, mean,
// M2) with Chan's formula, so a 1024x1024 VAE activation uses the whole GPU.
#include "backend/cuda/device_math.cuh"

namespace fluxrt::cuda::kern {
namespace {

constexpr int kBlock = 256;

template <int kThreads>
__device__ __forceinline__ float row_reduce(float v, bool is_max) {
  v = is_max ? warp_max(v) : warp_sum(v);
  if constexpr (kThreads == 32) {
    return v;
  } else {
    __shared__ float partial[kThreads / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();  // the previous reduction's readers are done with `partial`
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float r = partial[0];
#pragma unroll
    for (int i = 1; i < kThreads / 32; ++i) r = is_max ? fmaxf(r, partial[i]) : r + partial[i];
    return r;
  }
}

template <int kThreads>
__global__ void rows_kernel(RowArgs p) {
  constexpr int kRowsPerBlock = kBlock / kThreads;
  const int lane = threadIdx.x % kThreads;
  const int64_t row_step = int64_t{gridDim.x} * kRowsPerBlock;
  // Every thread of a block runs the same number of iterations (block-wide __syncthreads inside).
  for (int64_t base = int64_t{blockIdx.x} * kRowsPerBlock; base < p.rows; base += row_step) {
    const int64_t r = base + threadIdx.x / kThreads;
    const bool live = r < p.rows;
    const int64_t xo = live ? p.x.rows.offset(r) : 0, yo = live ? p.y.rows.offset(r) : 0;
    const int64_t xs = p.x.rows.col_stride, ys = p.y.rows.col_stride;
    const int64_t D = p.cols;
    auto x_at = [&](int64_t c) { return load_f(p.x.data, p.x.dtype, xo + c * xs); };

    if (p.op == RowOp::Softmax) {
      float m = -INFINITY;
      if (live)
        for (int64_t c = lane; c < D; c += kThreads) m = fmaxf(m, x_at(c));
      m = row_reduce<kThreads>(m, true);
      float s = 0;
      if (live)
        for (int64_t c = lane; c < D; c += kThreads) s += expf(x_at(c) - m);
      s = row_reduce<kThreads>(s, false);
      if (live)
        for (int64_t c = lane; c < D; c += kThreads) store_f(p.y.data, p.y.dtype, yo + c * ys, expf(x_at(c) - m) / s);
      continue;
    }
    if (p.op == RowOp::RmsNorm) {
      float ss = 0;
      if (live)
        for (int64_t c = lane; c < D; c += kThreads) {
          const float v = x_at(c);
          ss = fmaf(v, v, ss);
        }
      ss = row_reduce<kThreads>(ss, false);
      const float inv = rsqrtf(ss / static_cast<float>(D) + p.eps);
      if (live)
        for (int64_t c = lane; c < D; c += kThreads) {
          float v = x_at(c) * inv;
          if (p.round_before_weight) v = round_to(v, p.y.dtype);
          if (p.weight.data) v *= load_f(p.weight.data, p.weight.dtype, c * p.weight.rows.col_stride);
          store_f(p.y.data, p.y.dtype, yo + c * ys, v);
        }
      continue;
    }
    // LayerNorm and AdaLN: mean, then the biased variance around it.
    float s = 0;
    if (live)
      for (int64_t c = lane; c < D; c += kThreads) s += x_at(c);
    const float mean = row_reduce<kThreads>(s, false) / static_cast<float>(D);
    float v2 = 0;
    if (live)
      for (int64_t c = lane; c < D; c += kThreads) {
        const float d = x_at(c) - mean;
        v2 = fmaf(d, d, v2);
      }
    const float inv = rsqrtf(row_reduce<kThreads>(v2, false) / static_cast<float>(D) + p.eps);
    if (!live) continue;
    if (p.op == RowOp::AdaLn) {
      const int64_t so = p.shift.rows.offset(r / p.shift.row_div), sco = p.scale.rows.offset(r / p.scale.row_div);
      for (int64_t c = lane; c < D; c += kThreads) {
        // x*a + b with a = inv*(1 + scale), b = shift - mean*a (DESIGN.md section 2).
        const float a = inv * (1.0f + load_f(p.scale.data, p.scale.dtype, sco + c * p.scale.rows.col_stride));
        const float b = load_f(p.shift.data, p.shift.dtype, so + c * p.shift.rows.col_stride);
        store_f(p.y.data, p.y.dtype, yo + c * ys, fmaf(x_at(c) - mean, a, b));
      }
    } else {
      for (int64_t c = lane; c < D; c += kThreads) {
        float v = (x_at(c) - mean) * inv;
        if (p.weight.data) v *= load_f(p.weight.data, p.weight.dtype, c * p.weight.rows.col_stride);
        if (p.bias.data) v += load_f(p.bias.data, p.bias.dtype, c * p.bias.rows.col_stride);
        store_f(p.y.data, p.y.dtype, yo + c * ys, v);
      }
    }
  }
}

// Stage 1: block (group, split) computes count, mean and M2 of its slice of the group.
__global__ void group_stats_kernel(const void* x, DT dt, int64_t n_per, float* partials) {
  const int64_t group = blockIdx.x;
  const int split = blockIdx.y;
  const int64_t chunk = (n_per + kGroupNormSplits - 1) / kGroupNormSplits;
  const int64_t begin = split * chunk;
  const int64_t end = begin + chunk < n_per ? begin + chunk : n_per;
  const int64_t base = group * n_per;
  float s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kBlock) s += load_f(x, dt, base + i);
  const int64_t count = end > begin ? end - begin : 0;
  const float mean = count ? row_reduce<kBlock>(s, false) / static_cast<float>(count) : row_reduce<kBlock>(0.f, false);
  float m2 = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kBlock) {
    const float d = load_f(x, dt, base + i) - mean;
    m2 = fmaf(d, d, m2);
  }
  m2 = row_reduce<kBlock>(m2, false);
  if (threadIdx.x == 0) {
    float* out = partials + (group * kGroupNormSplits + split) * 3;
    out[0] = static_cast<float>(count);
    out[1] = mean;
    out[2] = m2;
  }
}

// Stage 2: one thread per group merges the splits (Chan et al.) into mean and 1/std.
__global__ void group_finalize_kernel(float* partials, int64_t groups, float eps) {
  const int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (g >= groups) return;
  double n = 0, mean = 0, m2 = 0;
  for (int s = 0; s < kGroupNormSplits; ++s) {
    const float* p = partials + (g * kGroupNormSplits + s) * 3;
    const double nb = p[0];
    if (nb == 0) continue;
    const double delta = p[1] - mean, total = n + nb;
    mean += delta * nb / total;
    m2 += p[2] + delta * delta * n * nb / total;
    n = total;
  }
  float* stats = partials + groups * kGroupNormSplits * 3;
  stats[2 * g] = static_cast<float>(mean);
  stats[2 * g + 1] = static_cast<float>(1.0 / sqrt(m2 / (n > 0 ? n : 1) + eps));
}

__global__ void group_apply_kernel(const void* x, DT xdt, void* y, DT ydt, Operand weight, Operand bias, int64_t C,
                                   int64_t HW, int64_t cg, const float* stats, bool silu, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t nc = i / HW;
    const int64_t c = nc % C, n = nc / C;
    const int64_t g = n * (C / cg) + c / cg;
    float v = (load_f(x, xdt, i) - stats[2 * g]) * stats[2 * g + 1];
    if (weight.data) v *= load_f(weight.data, weight.dtype, c * weight.rows.col_stride);
    if (bias.data) v += load_f(bias.data, bias.dtype, c * bias.rows.col_stride);
    if (silu) v = silu_f(v);
    store_f(y, ydt, i, v);
  }
}

}  // namespace

cudaError_t launch_rows(const RowArgs& p, cudaStream_t stream, int sm_count) {
  if (p.rows == 0) return cudaSuccess;
  if (p.cols <= 2048) {
    const int64_t groups = (p.rows + kBlock / 32 - 1) / (kBlock / 32);
    rows_kernel<32><<<grid_for(groups * kBlock, kBlock, sm_count), kBlock, 0, stream>>>(p);
  } else {
    rows_kernel<kBlock><<<grid_for(p.rows * kBlock, kBlock, sm_count), kBlock, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

cudaError_t launch_group_norm(const void* x, DType x_dtype, void* y, DType y_dtype, Operand weight, Operand bias,
                              int64_t N, int64_t C, int64_t HW, int64_t groups, float eps, bool silu, float* partials,
                              cudaStream_t stream, int sm_count) {
  const int64_t total = N * C * HW;
  if (total == 0) return cudaSuccess;
  const int64_t ng = N * groups, cg = C / groups;
  group_stats_kernel<<<dim3(static_cast<unsigned>(ng), kGroupNormSplits), kBlock, 0, stream>>>(x, x_dtype, cg * HW,
                                                                                               partials);
  group_finalize_kernel<<<static_cast<unsigned>((ng + 127) / 128), 128, 0, stream>>>(partials, ng, eps);
  group_apply_kernel<<<grid_for(total, kBlock, sm_count), kBlock, 0, stream>>>(
      x, x_dtype, y, y_dtype, weight, bias, C, HW, cg, partials + ng * kGroupNormSplits * 3, silu, total);
  return cudaGetLastError();
}

}  // namespace fluxrt::cuda::kern
