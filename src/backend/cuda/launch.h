#pragma once
// The boundary between the host side of the CUDA backend (.cpp files, compiled by g++: Tensor,
// validation, errors, library calls) and the kernels (.cu files, compiled by nvcc). Only plain
// structs cross it: nvcc's front end cannot compile fmt (core/error.h), so .cu files never include
// core/tensor.h. Launchers queue work on `stream` and return the launch status.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace fluxrt::cuda::kern {

constexpr int kMaxRank = 8;  // = fluxrt::kMaxDims (checked in cuda_kernels.cpp)

// A tensor viewed as [rows, cols]: element offset of row r for any strides of the leading dims
// (the device twin of backend/row_index.h), plus the column stride (1, or 0 for a broadcast).
struct RowMap {
  int lead = 0;
  int64_t extent[kMaxRank - 1] = {};
  int64_t stride[kMaxRank - 1] = {};
  int64_t col_stride = 1;

  __host__ __device__ __forceinline__ int64_t offset(int64_t r) const {
    int64_t off = 0;
    for (int i = lead - 1; i >= 0; --i) {
      const int64_t e = extent[i];
      off += (r % e) * stride[i];
      r /= e;
    }
    return off;
  }
};

// One tensor argument: its data (already offset to the view's first element), dtype and rows.
// `row_div` maps the kernel's row r to this operand's row r / row_div (a [B, D] modulation
// vector read by the rows of [B, L, D]: row_div = L). data == nullptr: absent.
struct Operand {
  void* data = nullptr;
  DType dtype = DType::F32;
  RowMap rows;
  int64_t row_div = 1;
};

// ---- copies (copy.cu) ----
struct CopyLayout {
  int rank = 0;
  int64_t extent[kMaxRank] = {};
  int64_t dst_stride[kMaxRank] = {};
  int64_t src_stride[kMaxRank] = {};
};
cudaError_t copy_strided(void* dst, DType dst_dtype, const void* src, DType src_dtype, const CopyLayout& layout,
                         int64_t n, cudaStream_t stream, int sm_count);
// Every element of the view (layout's dst strides; src strides unused) set to the low `word_bytes`
// (1, 2, 4 or 8) bytes of `pattern`.
cudaError_t fill_strided(void* dst, size_t word_bytes, uint64_t pattern, const CopyLayout& layout, int64_t n,
                         cudaStream_t stream, int sm_count);

// ---- element-wise maps (elementwise.cu) ----
enum class MapOp {
  Silu, GeluTanh, QuickGelu, Scale,  // y = f(a)
  Add, Mul,                          // y = a (+|*) b
  GluSilu, GluGelu,                  // y = act(a) * b
  GatedResidual,                     // y = a + c * b   (c: the gate, row_div = L)
  ChannelNorm, ChannelDenorm,        // y = (a - b) / sqrt(c + alpha), y = a * sqrt(c + alpha) + b
  BiasResidual,                      // y = a + b + c   (conv epilogue: bias b per channel, residual c)
};
struct MapArgs {
  MapOp op = MapOp::Silu;
  float alpha = 1.0f;
  Operand a, b, c, y;
  int64_t rows = 0, cols = 0;
  // Per-column operands: b and/or c hold one value per ROW of the kernel, indexed (r / div) % mod
  // (a per-channel vector on NCHW rows of width H*W). 0 = normal operand.
  int64_t b_chan_div = 0, b_chan_mod = 0, c_chan_div = 0, c_chan_mod = 0;
  bool vectorized = false;  // host checked: cols % 8 == 0, unit col strides, 16-byte aligned rows
};
cudaError_t launch_map(const MapArgs& args, cudaStream_t stream, int sm_count);

// ---- row reductions (norm.cu) ----
enum class RowOp { Softmax, LayerNorm, RmsNorm, AdaLn };
struct RowArgs {
  RowOp op = RowOp::Softmax;
  Operand x, y;
  Operand weight, bias;  // LayerNorm / RmsNorm vectors over columns (rows.lead = 0)
  Operand shift, scale;  // AdaLn [B, D] with row_div = L
  float eps = 0;
  bool round_before_weight = false;
  int64_t rows = 0, cols = 0;
};
cudaError_t launch_rows(const RowArgs& args, cudaStream_t stream, int sm_count);

// Embedding: out[i, :] = table[ids[i], :].
cudaError_t launch_embedding(const void* ids, DType ids_dtype, int64_t ids_stride, int64_t n, Operand table,
                             Operand out, int64_t cols, cudaStream_t stream, int sm_count);

// GroupNorm (+SiLU) on contiguous [N, C, HW]; `partials` holds group_norm_scratch_floats(N, G) floats.
constexpr int kGroupNormSplits = 32;
constexpr int64_t group_norm_scratch_floats(int64_t N, int64_t G) { return N * G * (kGroupNormSplits * 3 + 2); }
cudaError_t launch_group_norm(const void* x, DType x_dtype, void* y, DType y_dtype, Operand weight, Operand bias,
                              int64_t N, int64_t C, int64_t HW, int64_t groups, float eps, bool silu, float* partials,
                              cudaStream_t stream, int sm_count);

// Nearest 2x upsampling and/or zero padding of contiguous [N*C planes, H, W] into
// [planes, Ho, Wo]: y[p, i, j] = x[p, (i - pad_top) / up, (j - pad_left) / up] inside, 0 outside.
cudaError_t launch_pad_upsample(const void* x, void* y, DType dtype, int64_t planes, int64_t H, int64_t W, int up,
                                int64_t pad_top, int64_t pad_left, int64_t Ho, int64_t Wo, cudaStream_t stream,
                                int sm_count);

// Linear epilogue: y[m, n] = residual + gate[n] * act(acc[m, n] + bias[n]) from an f32 GEMM result.
enum class Act { None, GeluTanh, Silu };
cudaError_t launch_linear_epilogue(const float* acc, int64_t ld_acc, Operand y, Operand bias, Act act, Operand gate,
                                   Operand residual, int64_t M, int64_t N, cudaStream_t stream, int sm_count);

// ---- tiled VAE passes (tile_blend.cu; the formulas are backend/args/tile_blend.h's) ----
struct TileBlendParams {
  const void* tile = nullptr;  // [planes, tile_h, tile_w] contiguous
  DType tile_dtype = DType::F32;
  float* acc = nullptr;         // [planes, H, W] f32 contiguous
  float* weight_sum = nullptr;  // [H, W] f32
  int64_t planes = 0, tile_h = 0, tile_w = 0, H = 0, W = 0, top = 0, left = 0, ramp = 0;
  bool ramp_top = false, ramp_bottom = false, ramp_left = false, ramp_right = false;
};
cudaError_t launch_tile_blend(const TileBlendParams& p, cudaStream_t stream, int sm_count);
// out[p, k] = acc[p, k] / weight_sum[k] rounded to out_dtype, for p < planes, k < hw.
cudaError_t launch_tile_normalize(const float* acc, const float* weight_sum, void* out, DType out_dtype,
                                  int64_t planes, int64_t hw, cudaStream_t stream, int sm_count);

// ---- attention (attention.cu) ----
enum class Rope { None, AdjacentPairs, HalfSplit };
struct AttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  DType dtype = DType::F32;  // q, k, v and out
  int64_t B = 0, Lq = 0, Lk = 0, H = 0, Hkv = 0, D = 0;
  int64_t q_stride[3] = {}, k_stride[3] = {}, v_stride[3] = {}, o_stride[3] = {};  // b, l, h (d stride 1)
  float scale = 0;
  Rope rope = Rope::None;
  // RoPE tables (f32): [L, D/2] (batch stride 0) or [B, L, D/2].
  const float* k_cos = nullptr;
  const float* k_sin = nullptr;
  int64_t k_rope_stride[2] = {};  // b, l
  const float* q_cos = nullptr;
  const float* q_sin = nullptr;
  int64_t q_rope_stride[2] = {};
  int64_t q_pos_offset = 0;   // table row of query i is i + q_pos_offset
  bool causal = false;        // query i sees keys j <= i + (Lk - Lq)
  const void* mask = nullptr; // [B, Lk] bytes, nonzero = attend
  int64_t mask_stride[2] = {};
  const float* bias = nullptr;  // f32, broadcast strides (0 for size-1 dims) over b, h, i, j
  int64_t bias_stride[4] = {};
};

// One launch for all heads and the batch: block (8 query rows, head, batch), one warp per query
// row, key/value tiles of 32 rotated in f32 into shared memory (RoPE on load), f32 scores and
// accumulators, any even D <= 512 (the VAE's 512-wide head included), every variant (GQA, causal, padding mask, bias). Softmax with the
// fixed Cauchy-Schwarz maximum m_i = |c q_i| max_j |k_j| and exp2 (c = scale * log2 e) when
// `fixed_max`; rows whose sum l_i falls outside [2^-60, 2^60] are redone with the exact online
// maximum (counted in *fallback_rows). With a bias, or !fixed_max, every row runs online.
// `kmax` is scratch for B*Hkv floats. CUDA cores only; the FLUX shapes (head dim 128, bf16/f16, no
// GQA/mask/bias/causal) go to the tensor-core version in attention_tc.h instead (docs/cuda.md).
cudaError_t launch_attention(const AttentionParams& p, bool fixed_max, float* kmax, int* fallback_rows,
                             cudaStream_t stream);

}  // namespace fluxrt::cuda::kern
