#pragma once
// The row work of the oneDNN attention (attention_onednn.cpp) between and before its two matmul
// products, on the CPU's best Highway target: the probabilities of a row of scores with their
// sum, a row's scaled maximum, and a q, k or v row rotated by RoPE and stored in the compute type.
// Each call goes through Highway's dispatch table; row_lanes() fills that table, so call it once
// before worker threads do.
#include <cstddef>
#include <cstdint>

namespace fluxrt::backend::cpu::detail {

// How a probability row is stored for P·V.
enum ProbabilityStore : int {
  kStoreF32 = 0,        // f32, exp2 accurate to f32
  kStoreF32AsBf16 = 1,  // f32 holding bf16-rounded values (the bf16 numerics on any CPU)
  kStoreBf16 = 2,       // bf16
};

// p_j = 2^(c s_j - m + maskadd_j) for j < n (a multiple of row_lanes()), stored into p as `store`
// (a ProbabilityStore) says; returns the sum of the stored values, so the weights P·V applies sum
// to exactly that. maskadd may be null.
float exp_row(const float* s, int64_t n, float c, float m, const float* maskadd, void* p, int store);

// max_j (c s_j + maskadd_j) over j < n (a multiple of row_lanes()); maskadd may be null.
float max_scaled_row(const float* s, int64_t n, float c, const float* maskadd);

// n elements of src (bf16 when src_bf16, else f32) as f32, rotated by RoPE when cos is given
// (`half_split`: pairs (j, j + n/2), else adjacent pairs), rounded to bf16 unless store is
// kStoreF32, written to dst as store says; *norm2 gets the squared norm of what was written.
// Returns false, touching nothing, for a row off the target's vector grid (the caller's scalar
// helpers take it then).
bool prepare_row_vectorized(const void* src, bool src_bf16, int64_t n, const float* cos, const float* sin,
                            bool half_split, int store, void* dst, double* norm2);

// f32 lanes of the selected target's vectors (and the first dispatch, which selects it).
size_t row_lanes();

}  // namespace fluxrt::backend::cpu::detail
