#pragma once
// Argument structs for the element-wise, activation, softmax and embedding kernels.
//
// Stride contract shared by every struct here unless a field says otherwise: tensors are views of
// any rank (<= kMaxDims) whose LAST dimension has stride 1; the leading dimensions may have any
// strides (slices, chunks of a fused projection, stride-0 broadcasts on inputs). Outputs must not
// overlap inputs except where a field says in-place is allowed. The ops layer makes a contiguous
// copy first when a caller's tensor breaks the contract, so kernels never check it in release.
#include "core/tensor.h"

namespace fluxrt::backend {

enum class UnaryOp {
  Silu,       // x * sigmoid(x)
  GeluTanh,   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  QuickGelu,  // x * sigmoid(1.702 x) (CLIP)
  Scale,      // alpha * x
};

struct UnaryArgs {
  UnaryOp op = UnaryOp::Silu;
  float alpha = 1.0f;  // UnaryOp::Scale only
  Tensor x;            // [..., D]
  Tensor y;            // same shape as x; may be x itself (in place)
};

enum class BinaryOp { Add, Mul };

struct BinaryArgs {
  BinaryOp op = BinaryOp::Add;
  Tensor a;  // [..., D]
  Tensor b;  // same shape as a after broadcasting (the ops layer expands it: stride-0 dims allowed,
             // including the last dim, e.g. a per-row scalar [B, L, 1] expanded to [B, L, D])
  Tensor y;  // same shape as a; may be a itself (in place)
};

enum class GluActivation { Silu, GeluTanh };

// Gated linear unit: y = act(gate) * up. SwiGLU passes the two halves of one [..., 2M] tensor as
// views; T5's gated GELU passes two separate projections.
struct GluArgs {
  GluActivation act = GluActivation::Silu;
  Tensor gate;  // [..., M]
  Tensor up;    // [..., M]
  Tensor y;     // [..., M]
};

// x + gate * y with gate [B, D] broadcast over L (FLUX gated residual).
struct GatedResidualArgs {
  Tensor x;     // [B, L, D]
  Tensor gate;  // [B, D], stride(1) == 1, stride(0) any (a chunk of the modulation vector)
  Tensor y;     // [B, L, D]
  Tensor out;   // [B, L, D]; may be x itself (in place)
};

// Softmax over the last dimension, computed in f32 with the row maximum subtracted.
struct SoftmaxArgs {
  Tensor x;  // [..., D]
  Tensor y;  // same shape; may be x itself
};

// out[i, :] = table[ids[i], :] converted to out's dtype. Ids are checked against V by the ops layer.
struct EmbeddingArgs {
  Tensor ids;    // [N] i32 or i64, contiguous (the ops layer flattens)
  Tensor table;  // [V, D], stride(1) == 1, any float dtype
  Tensor out;    // [N, D], stride(1) == 1
};

}  // namespace fluxrt::backend
