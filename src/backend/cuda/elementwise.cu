// Element-wise kernels: one generic map over [rows, cols] views (each thread 8 consecutive
// columns: one or two 16-byte loads per operand when the host found the rows aligned), embedding
// gathers, the linear epilogue and the VAE's pad/upsample copy. Arithmetic in f32, one rounding
// at the store.
#include "backend/cuda/device_math.cuh"

namespace fluxrt::cuda::kern {
namespace {

__device__ __forceinline__ float apply(const MapArgs& p, float a, float b, float c) {
  switch (p.op) {
    case MapOp::Silu: return silu_f(a);
    case MapOp::GeluTanh: return gelu_tanh_f(a);
    case MapOp::QuickGelu: return a / (1.0f + expf(-1.702f * a));
    case MapOp::Scale: return p.alpha * a;
    case MapOp::Add: return a + b;
    case MapOp::Mul: return a * b;
    case MapOp::GluSilu: return silu_f(a) * b;
    case MapOp::GluGelu: return gelu_tanh_f(a) * b;
    case MapOp::GatedResidual: return fmaf(c, b, a);  // one rounding, as the f64 oracle rounds once
    case MapOp::ChannelNorm: return (a - b) / sqrtf(c + p.alpha);
    case MapOp::ChannelDenorm: return fmaf(a, sqrtf(c + p.alpha), b);
    case MapOp::BiasResidual: return a + b + c;
  }
  return a;
}

__device__ __forceinline__ bool uses_b(MapOp op) { return op >= MapOp::Add; }
__device__ __forceinline__ bool uses_c(MapOp op) { return op >= MapOp::GatedResidual; }

// A per-channel operand (one value per kernel row) or a normal one.
__device__ __forceinline__ float chan_value(const Operand& o, int64_t r, int64_t div, int64_t mod) {
  return load_f(o.data, o.dtype, ((r / div) % mod) * o.rows.col_stride);
}

template <bool kVec>
__global__ void map_kernel(MapArgs p) {
  const int64_t chunks_per_row = (p.cols + 7) / 8;
  const int64_t total = p.rows * chunks_per_row;
  const bool has_b = uses_b(p.op) && p.b.data, has_c = uses_c(p.op) && p.c.data;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / chunks_per_row;
    const int64_t c0 = (i % chunks_per_row) * 8;
    const int64_t n = p.cols - c0 < 8 ? p.cols - c0 : 8;
    float a[8], b[8], c[8], y[8];
    const int64_t a_off = p.a.rows.offset(r / p.a.row_div);
    const int64_t y_off = p.y.rows.offset(r / p.y.row_div);
    const bool b_chan = p.b_chan_div > 0, c_chan = p.c_chan_div > 0;
    const float bc = has_b && b_chan ? chan_value(p.b, r, p.b_chan_div, p.b_chan_mod) : 0.0f;
    const float cc = has_c && c_chan ? chan_value(p.c, r, p.c_chan_div, p.c_chan_mod) : 0.0f;
    if (kVec) {
      load8(p.a.data, p.a.dtype, a_off + c0, a);
      if (has_b && !b_chan) load8(p.b.data, p.b.dtype, p.b.rows.offset(r / p.b.row_div) + c0, b);
      if (has_c && !c_chan) load8(p.c.data, p.c.dtype, p.c.rows.offset(r / p.c.row_div) + c0, c);
    } else {
      const int64_t b_off = has_b && !b_chan ? p.b.rows.offset(r / p.b.row_div) : 0;
      const int64_t c_off = has_c && !c_chan ? p.c.rows.offset(r / p.c.row_div) : 0;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (k >= n) break;
        a[k] = load_f(p.a.data, p.a.dtype, a_off + (c0 + k) * p.a.rows.col_stride);
        if (has_b && !b_chan) b[k] = load_f(p.b.data, p.b.dtype, b_off + (c0 + k) * p.b.rows.col_stride);
        if (has_c && !c_chan) c[k] = load_f(p.c.data, p.c.dtype, c_off + (c0 + k) * p.c.rows.col_stride);
      }
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float bv = !has_b ? 0.0f : b_chan ? bc : b[k];
      const float cv = !has_c ? 0.0f : c_chan ? cc : c[k];
      y[k] = apply(p, a[k], bv, cv);
    }
    if (kVec) {
      store8(p.y.data, p.y.dtype, y_off + c0, y);
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (k >= n) break;
        store_f(p.y.data, p.y.dtype, y_off + (c0 + k) * p.y.rows.col_stride, y[k]);
      }
    }
  }
}

__global__ void embedding_kernel(const void* ids, DT ids_dt, int64_t ids_stride, int64_t n, Operand table, Operand out,
                                 int64_t cols) {
  const int64_t total = n * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / cols, col = i % cols;
    const int64_t id = ids_dt == DT::I64 ? static_cast<const int64_t*>(ids)[row * ids_stride]
                                         : static_cast<const int32_t*>(ids)[row * ids_stride];
    const float v = load_f(table.data, table.dtype, table.rows.offset(id) + col * table.rows.col_stride);
    store_f(out.data, out.dtype, out.rows.offset(row) + col * out.rows.col_stride, v);
  }
}

__global__ void linear_epilogue_kernel(const float* acc, int64_t ld, Operand y, Operand bias, Act act, Operand gate,
                                       Operand residual, int64_t M, int64_t N) {
  const int64_t total = M * N;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = i / N, n = i % N;
    float v = acc[m * ld + n];
    if (bias.data) v += load_f(bias.data, bias.dtype, n * bias.rows.col_stride);
    if (act == Act::GeluTanh) v = gelu_tanh_f(v);
    if (act == Act::Silu) v = silu_f(v);
    if (gate.data) {
      const float g = load_f(gate.data, gate.dtype, n * gate.rows.col_stride);
      const float r = load_f(residual.data, residual.dtype, residual.rows.offset(m) + n * residual.rows.col_stride);
      v = fmaf(g, v, r);
    }
    store_f(y.data, y.dtype, y.rows.offset(m) + n * y.rows.col_stride, v);
  }
}

template <typename Word>
__global__ void pad_upsample_kernel(const Word* x, Word* y, int64_t planes, int64_t H, int64_t W, int up,
                                    int64_t pad_top, int64_t pad_left, int64_t Ho, int64_t Wo) {
  const int64_t total = planes * Ho * Wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = i % Wo, t = i / Wo;
    const int64_t row = t % Ho, p = t / Ho;
    const int64_t sy = row - pad_top, sx = j - pad_left;
    Word v{};
    if (sy >= 0 && sx >= 0 && sy < H * up && sx < W * up) v = x[(p * H + sy / up) * W + sx / up];
    y[i] = v;
  }
}

}  // namespace

cudaError_t launch_map(const MapArgs& p, cudaStream_t stream, int sm_count) {
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  const int threads = 256;
  const int blocks = grid_for(p.rows * ((p.cols + 7) / 8), threads, sm_count);
  if (p.vectorized)
    map_kernel<true><<<blocks, threads, 0, stream>>>(p);
  else
    map_kernel<false><<<blocks, threads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_embedding(const void* ids, DType ids_dtype, int64_t ids_stride, int64_t n, Operand table, Operand out,
                             int64_t cols, cudaStream_t stream, int sm_count) {
  if (n == 0 || cols == 0) return cudaSuccess;
  const int threads = 256;
  embedding_kernel<<<grid_for(n * cols, threads, sm_count), threads, 0, stream>>>(ids, ids_dtype, ids_stride, n, table,
                                                                                  out, cols);
  return cudaGetLastError();
}

cudaError_t launch_linear_epilogue(const float* acc, int64_t ld_acc, Operand y, Operand bias, Act act, Operand gate,
                                   Operand residual, int64_t M, int64_t N, cudaStream_t stream, int sm_count) {
  if (M == 0 || N == 0) return cudaSuccess;
  const int threads = 256;
  linear_epilogue_kernel<<<grid_for(M * N, threads, sm_count), threads, 0, stream>>>(acc, ld_acc, y, bias, act, gate,
                                                                                    residual, M, N);
  return cudaGetLastError();
}

cudaError_t launch_pad_upsample(const void* x, void* y, DType dtype, int64_t planes, int64_t H, int64_t W, int up,
                                int64_t pad_top, int64_t pad_left, int64_t Ho, int64_t Wo, cudaStream_t stream,
                                int sm_count) {
  const int64_t total = planes * Ho * Wo;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  const int blocks = grid_for(total, threads, sm_count);
  if (dtype_size(dtype) == 4)
    pad_upsample_kernel<<<blocks, threads, 0, stream>>>(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y),
                                                         planes, H, W, up, pad_top, pad_left, Ho, Wo);
  else
    pad_upsample_kernel<<<blocks, threads, 0, stream>>>(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y),
                                                         planes, H, W, up, pad_top, pad_left, Ho, Wo);
  return cudaGetLastError();
}

}  // namespace fluxrt::cuda::kern
