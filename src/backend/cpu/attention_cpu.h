#pragma once
// CPU attention: one call for all heads, RoPE on load, fixed Cauchy-Schwarz row maximum with
// exp2, exact online-maximum fallback (see backend/args/attention.h for the contract).
//
// Work split: for each batch element, kv heads are taken in rounds (one head for FLUX-sized
// sequences, several when a head has too few query blocks to feed every thread). The keys of a
// round are rotated once into an f32 scratch laid out as [key tile][D][64] (transposed, so
// S = Q·K^T is a broadcast-FMA micro-kernel) together with max_j |k_j|; then all query heads of
// those kv heads and all their 48-row query blocks run in one OpenMP loop. Highway dynamic
// dispatch picks the SIMD width (SSE4 / AVX2 / AVX-512, scalar fallback).
#include <cstdint>

#include "backend/args/attention.h"

namespace fluxrt::backend::cpu {

struct AttentionCpuOptions {
  // Skip the fixed-maximum pass and use the exact online maximum everywhere (benchmarks and tests
  // compare the two). The bias variant always uses the online maximum.
  bool force_online = false;
};

struct AttentionCpuStats {
  int64_t blocks = 0;           // query blocks processed ((batch, head, 48 rows) each)
  int64_t fixed_blocks = 0;     // finished by the fixed-maximum pass
  int64_t fallback_blocks = 0;  // fixed pass rejected (bound too loose), recomputed exactly
  int64_t online_blocks = 0;    // ran the online maximum directly (bias or force_online)
};

void attention(const AttentionArgs& a);
void attention(const AttentionArgs& a, const AttentionCpuOptions& options, AttentionCpuStats* stats);

// Name of the SIMD target the dispatcher selected on this machine ("AVX2", "AVX3", ...).
const char* attention_target_name();

}  // namespace fluxrt::backend::cpu
