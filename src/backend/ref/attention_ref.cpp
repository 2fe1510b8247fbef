// Reference attention: naive loops in f64. Slow by design (O(B·H·Lq·Lk·D) scalar work).
#include "backend/ref/attention_ref.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/ref/ref_access.h"

namespace fluxrt::backend::ref {
namespace {

// Element (b, l, h, d) of a [B, L, H, D] tensor as f64.
double at4(const Tensor& t, const void* base, int64_t b, int64_t l, int64_t h, int64_t d) {
  return load(base, t.dtype(), b * t.stride(0) + l * t.stride(1) + h * t.stride(2) + d * t.stride(3));
}

// Rotates x (D values) in place with row `pos` of the cos/sin tables ([L, D/2] or [B, L, D/2]).
void rotate(std::vector<double>& x, RopeLayout layout, const Tensor& cos, const Tensor& sin, int64_t b,
            int64_t pos) {
  if (layout == RopeLayout::None) return;
  const int64_t half = static_cast<int64_t>(x.size()) / 2;
  const bool batched = cos.dim() == 3;
  auto entry = [&](const Tensor& t, int64_t j) {
    const int64_t off = (batched ? b * t.stride(0) : 0) + pos * t.stride(batched ? 1 : 0) + j * t.stride(-1);
    return load(t.raw_data(), t.dtype(), off);
  };
  for (int64_t j = 0; j < half; ++j) {
    const double c = entry(cos, j), s = entry(sin, j);
    const int64_t ia = layout == RopeLayout::AdjacentPairs ? 2 * j : j;
    const int64_t ib = layout == RopeLayout::AdjacentPairs ? 2 * j + 1 : j + half;
    const double xa = x[ia], xb = x[ib];
    x[ia] = xa * c - xb * s;
    x[ib] = xb * c + xa * s;
  }
}

}  // namespace

void attention_rows(const AttentionArgs& a, int64_t q_begin, int64_t q_end) {
  const int64_t B = a.q.size(0), Lq = a.q.size(1), H = a.q.size(2), D = a.q.size(3);
  const int64_t Lk = a.k.size(1), Hkv = a.k.size(2);
  const int64_t group = H / Hkv;
  q_begin = std::clamp<int64_t>(q_begin, 0, Lq);
  q_end = std::clamp<int64_t>(q_end, q_begin, Lq);
  const bool own_q_table = a.rope_q_cos.defined();
  const Tensor& qcos = own_q_table ? a.rope_q_cos : a.rope_cos;
  const Tensor& qsin = own_q_table ? a.rope_q_sin : a.rope_sin;
  const int64_t q_pos_offset = own_q_table ? 0 : Lk - Lq;
  const void* qb = a.q.raw_data();
  const void* kb = a.k.raw_data();
  const void* vb = a.v.raw_data();
  void* ob = a.out.raw_data();

  for (int64_t b = 0; b < B; ++b) {
    for (int64_t kvh = 0; kvh < Hkv; ++kvh) {
      // Rotated keys and values of this (batch, kv head) in f64.
      std::vector<double> K(Lk * D), V(Lk * D);
      for (int64_t j = 0; j < Lk; ++j) {
        std::vector<double> x(D);
        for (int64_t d = 0; d < D; ++d) x[d] = at4(a.k, kb, b, j, kvh, d);
        rotate(x, a.rope, a.rope_cos, a.rope_sin, b, j);
        std::copy(x.begin(), x.end(), K.begin() + j * D);
        for (int64_t d = 0; d < D; ++d) V[j * D + d] = at4(a.v, vb, b, j, kvh, d);
      }
      const int64_t rows = (q_end - q_begin) * group;
#pragma omp parallel for schedule(dynamic, 4)
      for (int64_t item = 0; item < rows; ++item) {
        const int64_t h = kvh * group + item / (q_end - q_begin);
        const int64_t i = q_begin + item % (q_end - q_begin);
        std::vector<double> q(D), s(Lk), o(D, 0.0);
        for (int64_t d = 0; d < D; ++d) q[d] = at4(a.q, qb, b, i, h, d);
        rotate(q, a.rope, qcos, qsin, b, i + q_pos_offset);
        double mx = -std::numeric_limits<double>::infinity();
        std::vector<char> valid(Lk, 1);
        for (int64_t j = 0; j < Lk; ++j) {
          if (a.causal && j > i + (Lk - Lq)) valid[j] = 0;
          if (a.key_padding_mask.defined() &&
              load(a.key_padding_mask.raw_data(), a.key_padding_mask.dtype(),
                   b * a.key_padding_mask.stride(0) + j * a.key_padding_mask.stride(1)) == 0)
            valid[j] = 0;
          if (!valid[j]) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[d] * K[j * D + d];
          dot *= static_cast<double>(a.scale);
          if (a.bias.defined()) {
            const Tensor& t = a.bias;
            auto idx = [&](int dim, int64_t v) { return t.size(dim) == 1 ? 0 : v * t.stride(dim); };
            dot += load(t.raw_data(), t.dtype(), idx(0, b) + idx(1, h) + idx(2, i) + idx(3, j));
          }
          s[j] = dot;
          mx = std::max(mx, dot);
        }
        double sum = 0;
        for (int64_t j = 0; j < Lk; ++j) {
          if (!valid[j]) continue;
          const double p = std::exp(s[j] - mx);
          sum += p;
          for (int64_t d = 0; d < D; ++d) o[d] += p * V[j * D + d];
        }
        const double inv = sum > 0 ? 1.0 / sum : 0.0;
        const int64_t base = b * a.out.stride(0) + i * a.out.stride(1) + h * a.out.stride(2);
        for (int64_t d = 0; d < D; ++d) store(ob, a.out.dtype(), base + d * a.out.stride(3), o[d] * inv);
      }
    }
  }
}

void attention(const AttentionArgs& a) { attention_rows(a, 0, a.q.size(1)); }

}  // namespace fluxrt::backend::ref
