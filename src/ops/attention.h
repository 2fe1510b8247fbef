#pragma once
// Attention front end: validates [B, L, H, D] inputs (views of a fused qkv projection are fine:
// only the last dimension must be contiguous), allocates the output and calls the device's kernel.
// The contract (RoPE on load, precision, masks) is documented in backend/args/attention.h.
#include <optional>

#include "backend/args/attention.h"
#include "core/tensor.h"
#include "ops/rope.h"

namespace fluxrt::ops {

// Where RoPE pairs sit in the head dimension; models name it through ops.
using backend::RopeLayout;

struct AttentionOptions {
  std::optional<float> scale;  // default 1/sqrt(D); T5 passes 1
  backend::RopeLayout rope = backend::RopeLayout::None;
  RopeTable rope_table;        // [L, D/2] or [B, L, D/2] f32, rows for the keys (and the queries)
  RopeTable rope_q_table;      // optional separate query positions (see AttentionArgs)
  bool causal = false;
  Tensor key_padding_mask;     // [B, Lk], any integer/bool dtype: nonzero = attend
  Tensor bias;                 // broadcastable to [B, H, Lq, Lk], any float dtype (T5)
};

// q [B, Lq, H, D], k/v [B, Lk, Hkv, D] (H % Hkv == 0) -> out [B, Lq, H, D] in q's dtype.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {});

// The same into a preallocated out [B, Lq, H, D] of q's dtype: unit last stride, any other strides
// (heads of a column slice of a wider buffer).
void attention_into(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                    const Tensor& out);

// Validates fully formed args (out preallocated) and runs the kernel of q's device.
void attention_into(const backend::AttentionArgs& args);

// Throws InvalidArgument / Unsupported with an "[attention] ..." message when args break the contract.
void validate_attention(const backend::AttentionArgs& args);

}  // namespace fluxrt::ops
