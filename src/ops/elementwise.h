#pragma once
// Element-wise ops, activations, softmax, embedding lookup and sequence concat/split.
// Inputs: f32, bf16 or f16 tensors of any strides (a copy is made when the last dim is strided);
// outputs are new contiguous tensors of the input's dtype unless stated.
#include <vector>

#include "core/tensor.h"

namespace fluxrt::ops {

Tensor silu(const Tensor& x);
Tensor gelu_tanh(const Tensor& x);   // 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))
Tensor quick_gelu(const Tensor& x);  // x * sigmoid(1.702 x) (CLIP)
Tensor scale(const Tensor& x, float alpha);
void scale_(Tensor& x, float alpha);

// a (op) b with b broadcast to a's shape (trailing dims, size-1 dims); b is converted to a's dtype
// when they differ. The result has a's shape and dtype.
Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
void add_(Tensor& a, const Tensor& b);
void mul_(Tensor& a, const Tensor& b);

// SwiGLU: x [..., 2M] -> silu(x[..., :M]) * x[..., M:]  [..., M]   (FLUX.2 MLPs, Qwen3 uses glu())
Tensor swiglu(const Tensor& x);
// T5 gated GELU: gelu_tanh(gate) * up, both [..., M].
Tensor gated_gelu(const Tensor& gate, const Tensor& up);
// act(gate) * up for two separate tensors (SiLU: Qwen3's silu(gate_proj) * up_proj).
Tensor silu_mul(const Tensor& gate, const Tensor& up);
// The three above into a preallocated y [..., M] of the input dtype: unit column stride, any
// leading strides (a column slice of a wider buffer, e.g. the [attention ; MLP] input of a FLUX
// single block, so no concat copies it there).
void swiglu_into(const Tensor& x, const Tensor& y);
void gated_gelu_into(const Tensor& gate, const Tensor& up, const Tensor& y);
void silu_mul_into(const Tensor& gate, const Tensor& up, const Tensor& y);

// FLUX gated residual x + gate * y, gate [B, D] broadcast over L; x, y [B, L, D].
Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& y);
void gated_residual_(Tensor& x, const Tensor& gate, const Tensor& y);

// Softmax over the last dim (f32 internally).
Tensor softmax(const Tensor& x);

// Rows of `table` [V, D] (any float dtype) picked by `ids` (i32/i64, any shape) -> [*ids.shape, D]
// in `out_dtype`. Ids outside [0, V) are an InvalidArgument error naming the first bad one.
Tensor embedding(const Tensor& table, const Tensor& ids, DType out_dtype);

// Concatenation along `dim` into a new contiguous tensor (all inputs share dtype, device and the
// other extents), and the inverse split into views (no copies).
Tensor concat(const std::vector<Tensor>& xs, int dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim);

}  // namespace fluxrt::ops
