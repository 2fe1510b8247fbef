#pragma once
// Reference attention (the oracle): f64 arithmetic on the dtype-rounded inputs, RoPE in f64 from the
// f32 tables, exact softmax (true row maximum) with masks and bias, output rounded once.
#include <cstdint>

#include "backend/args/attention.h"

namespace fluxrt::backend::ref {

void attention(const AttentionArgs& a);

// Computes only query rows [q_begin, q_end) of every (batch, head) and leaves the other rows of
// a.out untouched: long-sequence tests check a few rows instead of paying O(L^2) f64 work.
void attention_rows(const AttentionArgs& a, int64_t q_begin, int64_t q_end);

}  // namespace fluxrt::backend::ref
