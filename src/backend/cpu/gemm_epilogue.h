#pragma once
// What finishes a block of x @ W^T in our own GEMMs (the packed AVX2 one, gemm_packed.h, and the
// AMX one, gemm_amx.h): bias, GELU-tanh or SiLU, the gated residual, and the rounding to y's
// dtype, on an f32 block while it is still in cache. x86 with AVX2 + FMA + F16C only (every CPU
// either GEMM runs on); the row conversions are shared with the packing of activations.
#include <cstdint>

#include "backend/args/linear.h"
#include "core/tensor.h"

namespace fluxrt::backend::gemm {

struct EpilogueCtx {
  const float* bias;  // [N] padded to a multiple of 8 past N, or null
  const float* gate;  // padded alike, or null
  Activation act;
  const Tensor* residual;  // [M, N] when gate is set (may alias y)
  const Tensor* y;         // [M, N], rows strided
};

// Rows [i0, i0 + mc) x columns [j0, j0 + nc) of y from the f32 block c (row stride ldc floats,
// rows 32-byte aligned and readable to a multiple of 8 columns): y = residual + gate * act(c +
// bias), each step as the flags say, rounded once to y's dtype. c is overwritten; `row` holds
// nc + 8 floats of scratch.
void epilogue_block(const EpilogueCtx& e, float* c, int64_t ldc, int64_t i0, int64_t mc, int64_t j0,
                    int64_t nc, float* row);

// The first n values of a bias or gate vector v (any dtype, any stride) as f32 into
// dst[0, n_pad), zeros past n: the padded form EpilogueCtx reads.
void padded_vector_f32(const Tensor& v, int64_t n, int64_t n_pad, float* dst);

// n values of dtype dt at src as f32 into dst, and back (round to nearest even for bf16).
void load_row_f32(const void* src, DType dt, int64_t n, float* dst);
void store_row_f32(const float* src, DType dt, int64_t n, void* dst);

}  // namespace fluxrt::backend::gemm
