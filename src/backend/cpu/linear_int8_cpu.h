#pragma once
// W8A8 linear: int8 weights with one f32 scale per output feature, activations quantized per
// token (per row of x: symmetric int8, scale max|x_row| / 127) at each call, oneDNN's int8 matmul
// with int32 accumulation (AMX-INT8, AVX512-VNNI or AVX-VNNI where the CPU has them; oneDNN's
// AVX2 int8 GEMM elsewhere), then y = act(s_x[m] s_w[n] acc + bias[n]) and the gated residual.
//
// A speed mode for CPUs with int8 matrix units, off by default (FLUXRT_LINEAR_IMPL=w8a8 turns it
// on for dense and Q8_0 weights; docs/quantization.md has its measured quality). The weight is
// requantized per row from whatever it was (bf16, f32, the dequantized Q8_0 blocks), so the
// resident weight is one byte per element plus N scales.
//
// The int8 primitive writes s_w[n] acc in f32 (output scales per column, the one post-op oneDNN
// 2.6 runs in JIT code for int8 on every ISA we checked); our epilogue applies the per-token
// scale, bias, activation and gated residual in one pass over blocks of kInt8RowsPerCall rows,
// so the f32 temporary stays at kInt8RowsPerCall x N.
#include <cstdint>
#include <memory>
#include <string>

#include "backend/args/linear.h"

namespace fluxrt::backend {

struct Int8LinearCpu;

// Rows of x per int8 matmul call (and per f32 temporary).
inline constexpr int64_t kInt8RowsPerCall = 256;

// weight [N, K] in any float dtype (a dequantized quantized weight included), bias [N] or
// undefined. Null when oneDNN has no JIT int8 matmul for this shape here: the caller keeps its
// usual path.
std::shared_ptr<Int8LinearCpu> prepare_int8_linear_cpu(const Tensor& weight, const Tensor& bias);
void int8_linear_cpu(const LinearArgs& args, const Int8LinearCpu& w);
// The primitives and scratch int8_linear_cpu would make for `args`, computing nothing.
void plan_int8_linear_cpu(const LinearArgs& args, const Int8LinearCpu& w);
// "onednn-int8 (gemm:jit, 9.4 MB)"
std::string describe_int8_linear_cpu(const Int8LinearCpu& w);
// The oneDNN implementation of the int8 matmul, e.g. "brg:avx512_core_amx".
std::string int8_linear_impl(const Int8LinearCpu& w);

// Per-row symmetric quantization of x [M, K] (f32, bf16 or f16; stride(1) == 1) to `levels`
// steps each side: q[m * K + k] = round(x[m, k] / scales[m]) in [-levels, levels], scales[m] =
// max_k |x[m, k]| / levels (1 for a zero row, NaN for a row with an inf or NaN).
void quantize_rows_int8(const Tensor& x, int8_t* q, float* scales, int levels = 127);
// The levels of the weights: 127 where oneDNN has VNNI or AMX (onednn::native_int8), else 63,
// which keeps oneDNN's AVX2 int8 GEMM from saturating its 16-bit pair sums (with 127 the products
// came out ~3% off). Activations always use 127.
int int8_weight_levels();
// Per-row quantization of a weight [N, K] as prepare_int8_linear_cpu does it (tests).
void quantize_weight_int8(const Tensor& weight, int8_t* q, float* scales);

}  // namespace fluxrt::backend
