#pragma once
// CPU attention with its two products on oneDNN matmul primitives, so they run on the bf16
// matrix units (AMX tiles, AVX512_BF16 dot products) where the CPU has them. The seed design is
// kept between the products: RoPE applied as q and k are loaded, the fixed Cauchy-Schwarz row
// maximum with exp2, an exact maximum for the rows the bound rejects, all heads in one parallel
// loop, [B, L, H, D] in and out.
//
// Per kv head (once per call): keys rotated, rounded to the compute type and reordered, chunk by
// chunk of kChunk keys, into the layout the Q·K^T primitive wants ([D, keys] weights); values
// likewise as the [keys, D] weights of P·V. Per 64-row query block of each query head:
//   q rotated and rounded (unscaled, as a bf16 framework computes it), m_i = c |q_i| max_j |k_j|
//   with c = scale·log2(e); then for each key chunk S = Q·K^T (f32 out), P = 2^(c S - m) rounded
//   to the compute type with the row sums l taken over the rounded values, O += P·V (f32, the
//   matmul's sum post-op); finally O / l. A block with a row outside the acceptance window of
//   attention_rows.h is redone with each row's exact maximum (one more Q·K^T pass to find it).
//
// Compute type: bf16 when oneDNN has native bf16 and q is bf16; f32 otherwise (the same code,
// which is how CPUs without bf16 units test it). attention_cpu.h decides when this runs.
#include <string>

#include "backend/args/attention.h"

namespace fluxrt::backend::cpu {

struct AttentionCpuOptions;
struct AttentionCpuStats;

// Whether attention_onednn handles these arguments (no causal mask, no bias).
bool attention_onednn_supports(const AttentionArgs& a);

// Whether its compute type for `a` would be bf16 (native bf16 and a bf16 q).
bool attention_onednn_uses_bf16(const AttentionArgs& a);

void attention_onednn(const AttentionArgs& a, const AttentionCpuOptions& options, AttentionCpuStats* stats);

// The one-time work of a call like `a`: its primitives and every worker thread's buffers.
void attention_onednn_plan(const AttentionArgs& a);

// Primitive sets (one per head dim, key chunking and compute type) made in this process.
int64_t attention_onednn_primitive_sets();

// "onednn bf16 (brg:avx512_core_amx_bf16)" or "onednn f32 (gemm:jit)": the compute type and the
// Q·K^T primitive's implementation for `a` (built and cached as a call would; data not read).
std::string attention_onednn_describe(const AttentionArgs& a, const AttentionCpuOptions& options);

}  // namespace fluxrt::backend::cpu
