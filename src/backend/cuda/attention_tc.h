#pragma once
// Tensor-core attention (attention_tc.cu) for the FLUX case: head dim 128, bf16 or f16, q/k/v with
// the same head count, no mask, no bias, not causal. Everything else runs the CUDA-core kernel of
// attention.cu. Plain structs only (see launch.h): this header is read by g++ and by nvcc.
#include "backend/cuda/launch.h"

namespace fluxrt::cuda::kern {

constexpr int kTcHeadDim = 128;

// Device scratch the launcher needs for `p` (rotated keys, max |k_j| per head, per-tile flags).
size_t attention_tc_scratch_bytes(const AttentionParams& p);

// One launch per pass for all heads and the batch on [B, L, H, 128] with the strides of `p`:
//  1. a pre-pass rotates every key once (RoPE in f32), rounds it to the storage dtype into the
//     scratch as [B, H, Lk, 128] and takes max_j |k_j| per (batch, head) from the rounded keys;
//  2. bf16 with !online_only: the fixed-maximum kernel (m_i = c |q_i| max_j |k_j|, exp2), which
//     flags 64-row tiles holding a row with l_i outside [2^-60, 2^60] and counts those rows in
//     *fallback_rows (when not null);
//  3. the online-maximum kernel: every tile when online_only (f16 always: its P cannot hold the
//     fixed path's tiny probabilities), else only the flagged tiles (the others exit at once).
// Requires (host-checked): D = 128, Hkv = H, bf16/f16, no mask/bias/causal, Lk >= 1, scale > 0,
// unit d stride, q/k/v/out rows 16-byte aligned.
cudaError_t launch_attention_tc(const AttentionParams& p, bool online_only, void* scratch, int* fallback_rows,
                                cudaStream_t stream);

}  // namespace fluxrt::cuda::kern
