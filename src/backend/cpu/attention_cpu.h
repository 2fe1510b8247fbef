#pragma once
// CPU attention: one call for all heads, RoPE on load, fixed Cauchy-Schwarz row maximum with
// exp2, exact online-maximum fallback (see backend/args/attention.h for the contract).
//
// Work split: for each batch element, kv heads are taken in rounds (one head for FLUX-sized
// sequences, several when a head has too few query blocks to feed every thread). The keys of a
// round are rotated once into an f32 scratch packed as GEMM panels (keys transposed, so
// S = Q·K^T is a broadcast-FMA micro-kernel; values as [D / 2 vectors][64 keys][2 vectors])
// together with max_j |k_j|; then all query heads of those kv heads and all their 48-row query
// blocks run in one OpenMP loop. Per block: S = Q·K^T (6x2 or 12x2 register tile), p = exp2(s - m)
// with a degree-7 polynomial, O += P·V, a final O / l. Highway dynamic dispatch picks the SIMD
// width (SSE4 / AVX2 / AVX-512, scalar fallback); arithmetic is f32 FMA on every target.
//
// Fixed maximum: q is pre-scaled by scale·log2(e), m_i = |q_i|·max_j |k_j| bounds every score, so
// no running maximum and no rescaling of O. After the pass a row is accepted when
// 2^-60 <= l_i <= 2^60; otherwise (bound more than ~60 binades above the true maximum: terms
// flushed below 2^-127, or f32 rounding pushed scores far above a huge bound) the whole 48-row
// block is recomputed with the exact online maximum. The bias variant always runs online.
//
// Two implementations: this SIMD kernel (f32 FMA units, every mask and bias), and
// attention_onednn.h (both products on oneDNN matmul primitives, i.e. on the bf16 matrix units
// of CPUs that have them; no causal mask, no bias). Auto picks the oneDNN one where oneDNN has
// native bf16, q is bf16 and the sequence is long enough to feed the primitives (the FLUX
// transformers); FLUXRT_ATTENTION_IMPL=simd|onednn overrides Auto.
#include <cstdint>
#include <string>

#include "backend/args/attention.h"

namespace fluxrt::backend::cpu {

enum class AttentionCpuImpl { Auto, Simd, OneDnn };

struct AttentionCpuOptions {
  // Skip the fixed-maximum pass and use the exact maximum everywhere (benchmarks and tests
  // compare the two). The bias variant always uses the online maximum.
  bool force_online = false;
  // OneDnn where the arguments allow it (else Simd), Simd, or Auto (above).
  AttentionCpuImpl impl = AttentionCpuImpl::Auto;
  // OneDnn in f32 (no native bf16, or an f32 q) rounds q, k, v and the probabilities to bf16 as
  // its bf16 compute type does: the bf16 numerics, testable on any CPU.
  bool emulate_bf16 = false;
};

struct AttentionCpuStats {
  int64_t blocks = 0;           // query blocks processed ((batch, head, 48 rows) each)
  int64_t fixed_blocks = 0;     // finished by the fixed-maximum pass
  int64_t fallback_blocks = 0;  // fixed pass rejected (bound too loose), recomputed exactly
  int64_t online_blocks = 0;    // ran the exact maximum directly (bias or force_online)
};

void attention(const AttentionArgs& a);
// The one-time work attention(a) would do (the oneDNN implementation's primitives and buffers),
// computing nothing: the planning kernel table's attention slot.
void plan_attention(const AttentionArgs& a);
void attention(const AttentionArgs& a, const AttentionCpuOptions& options, AttentionCpuStats* stats);

// The implementation attention(a, options) runs for these arguments.
AttentionCpuImpl attention_impl_for(const AttentionArgs& a, const AttentionCpuOptions& options);
// Its description: "simd AVX3", "onednn bf16 (brg:avx512_core_amx_bf16)", ...
std::string describe_attention(const AttentionArgs& a, const AttentionCpuOptions& options);

// Scratch allocations made by attention() so far, process-wide. The buffers are per thread and
// grow to the largest call, so repeating a call of the same shapes on the same threads adds none.
int64_t attention_scratch_allocations();

// Name of the SIMD target the dispatcher selected on this machine ("AVX2", "AVX3", ...).
const char* attention_target_name();

}  // namespace fluxrt::backend::cpu
