#pragma once
// Shared by test_attention.cpp and test_attention_slow.cpp: case description, input generators
// (random, large norms, adversarial keys that make the Cauchy-Schwarz bound loose), the f64 oracle
// wrapper and a naive implementation in the tensor dtype (the "2x naive" yardstick).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/args/attention.h"
#include "backend/cpu/attention_cpu.h"
#include "backend/ref/attention_ref.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/attention.h"
#include "ops/rope.h"
#include "support/compare.h"

namespace fluxrt::test_attention {

using backend::AttentionArgs;
using backend::RopeLayout;

enum class Inputs {
  Random,         // N(0, 1): the bound is within a few binades, fixed path
  LargeNorm,      // q, k scaled by 20: scores in the thousands, bound far off -> fallback
  SelfSimilar,    // k = q + small noise with per-token norms 1..8: near one-hot rows, tight bound
  FarKey,         // key 0 has norm 3000 in dims no query touches: every row falls back
  MixedNorm,      // far key of norm 40 and query norms 0.05x..4x: some blocks pass, some fall back
  NearThreshold,  // far key of norm 45: bound ~60 binades above the true max, at the acceptance edge
};
enum class Rope { None, Flux1, Flux2, HalfSplit };
enum class Expect { Any, FixedOnly, AllFallback, SomeFallback, OnlineOnly };

struct Case {
  DType dtype = DType::F32;
  int64_t B = 1, Lq = 64, Lk = 64, H = 2, Hkv = 2, D = 64;
  Inputs inputs = Inputs::Random;
  Rope rope = Rope::None;
  bool causal = false;
  bool padding = false;
  bool bias = false;
  bool fused = false;  // q/k/v are slices of one [B, L, 3, H, D] tensor
  Expect expect = Expect::Any;
};

inline const char* inputs_name(Inputs i) {
  switch (i) {
    case Inputs::Random: return "random";
    case Inputs::LargeNorm: return "largenorm";
    case Inputs::SelfSimilar: return "selfsimilar";
    case Inputs::FarKey: return "farkey";
    case Inputs::MixedNorm: return "mixednorm";
    case Inputs::NearThreshold: return "nearthreshold";
  }
  return "?";
}

inline std::string case_name(const Case& c) {
  std::string s = std::string(dtype_name(c.dtype)) + "_B" + std::to_string(c.B) + "_Lq" + std::to_string(c.Lq) +
                  "_Lk" + std::to_string(c.Lk) + "_H" + std::to_string(c.H) + "x" + std::to_string(c.Hkv) + "_D" +
                  std::to_string(c.D) + "_" + inputs_name(c.inputs);
  const char* ropes[] = {"", "_flux1rope", "_flux2rope", "_halfsplitrope"};
  s += ropes[static_cast<int>(c.rope)];
  if (c.causal) s += "_causal";
  if (c.padding) s += "_padding";
  if (c.bias) s += "_bias";
  if (c.fused) s += "_fusedqkv";
  return s;
}

struct Problem {
  AttentionArgs args;  // args.out in the case dtype
  Tensor qkv;          // the fused buffer when Case::fused
};

inline RopeLayout layout_of(Rope r) {
  return r == Rope::None ? RopeLayout::None : r == Rope::HalfSplit ? RopeLayout::HalfSplit : RopeLayout::AdjacentPairs;
}

// FLUX position ids for L tokens: the first min(L/4, 64) are text, the rest an image grid.
inline Tensor flux_ids(int64_t L, int axes) {
  const int64_t text = std::min<int64_t>(L / 4, 64);
  const int64_t w = std::max<int64_t>(1, static_cast<int64_t>(std::sqrt(static_cast<double>(L - text))));
  std::vector<float> ids(L * axes, 0.0f);
  for (int64_t l = 0; l < L; ++l) {
    float* p = ids.data() + l * axes;
    if (l < text) {
      if (axes == 4) p[3] = static_cast<float>(l);  // FLUX.2 text: (0, 0, 0, l); FLUX.1 text: zeros
    } else {
      p[1] = static_cast<float>((l - text) / w);
      p[2] = static_cast<float>((l - text) % w);
    }
  }
  return Tensor::from_vector(ids, {L, axes}, DType::I64);
}

inline Problem make_problem(const Case& c, uint32_t seed = 1234) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t B = c.B, Lq = c.Lq, Lk = c.Lk, H = c.H, Hkv = c.Hkv, D = c.D;
  std::vector<float> q(B * Lq * H * D), k(B * Lk * Hkv * D), v(B * Lk * Hkv * D);
  for (auto& x : q) x = normal(rng);
  for (auto& x : k) x = normal(rng);
  for (auto& x : v) x = normal(rng);
  auto qat = [&](int64_t b, int64_t i, int64_t h) { return q.data() + ((b * Lq + i) * H + h) * D; };
  auto kat = [&](int64_t b, int64_t j, int64_t h) { return k.data() + ((b * Lk + j) * Hkv + h) * D; };
  const int64_t half = D / 2;
  // Dims {0, 1, D/2, D/2+1} form whole RoPE pairs in both layouts, so a query that is zero there
  // stays zero after rotation and a key living there is orthogonal to every query.
  const int64_t hidden[4] = {0, 1, half, half + 1};
  auto plant_far_key = [&](float norm) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d : hidden) qat(b, i, h)[d] = 0.0f;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hkv; ++h) {
        float* kp = kat(b, 0, h);
        std::fill(kp, kp + D, 0.0f);
        kp[0] = kp[half] = norm / std::sqrt(2.0f);
      }
  };
  switch (c.inputs) {
    case Inputs::Random: break;
    case Inputs::LargeNorm:
      for (auto& x : q) x *= 20.0f;
      for (auto& x : k) x *= 20.0f;
      break;
    case Inputs::SelfSimilar: {
      std::uniform_real_distribution<float> uni(1.0f, 8.0f);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < Lk; ++j)
          for (int64_t h = 0; h < Hkv; ++h) {
            const float s = uni(rng);
            for (int64_t d = 0; d < D; ++d) kat(b, j, h)[d] *= s;
          }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t h = 0; h < H; ++h) {
            const float* src = kat(b, i % Lk, h / (H / Hkv));
            for (int64_t d = 0; d < D; ++d) qat(b, i, h)[d] = src[d] + 0.1f * normal(rng);
          }
      break;
    }
    case Inputs::FarKey: plant_far_key(3000.0f); break;
    case Inputs::MixedNorm: {
      plant_far_key(40.0f);
      const float scales[3] = {0.05f, 1.0f, 4.0f};
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t h = 0; h < H; ++h) {
            const float s = scales[(i / 48 + h) % 3];  // whole 48-row blocks share a scale
            for (int64_t d = 0; d < D; ++d) qat(b, i, h)[d] *= s;
          }
      break;
    }
    case Inputs::NearThreshold: plant_far_key(45.0f); break;
  }

  Problem p;
  AttentionArgs& a = p.args;
  if (c.fused) {
    // [B, L, 3, H, D] with q, k, v as strided slices (Lq == Lk, H == Hkv).
    std::vector<float> all(B * Lq * 3 * H * D);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t l = 0; l < Lq; ++l)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) {
            const int64_t src = ((b * Lq + l) * H + h) * D + d;
            const int64_t base = (((b * Lq + l) * 3) * H + h) * D + d;
            all[base] = q[src];
            all[base + H * D] = k[src];
            all[base + 2 * H * D] = v[src];
          }
    p.qkv = Tensor::from_vector(all, {B, Lq, 3, H, D}, c.dtype);
    a.q = p.qkv.select(2, 0);
    a.k = p.qkv.select(2, 1);
    a.v = p.qkv.select(2, 2);
  } else {
    a.q = Tensor::from_vector(q, {B, Lq, H, D}, c.dtype);
    a.k = Tensor::from_vector(k, {B, Lk, Hkv, D}, c.dtype);
    a.v = Tensor::from_vector(v, {B, Lk, Hkv, D}, c.dtype);
  }
  a.out = Tensor::empty({B, Lq, H, D}, c.dtype);
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  a.rope = layout_of(c.rope);
  if (c.rope != Rope::None) {
    ops::RopeTable t;
    if (c.rope == Rope::HalfSplit) t = ops::rope_rotate_half(Lk, D);
    if (c.rope == Rope::Flux1) t = ops::rope_flux1(flux_ids(Lk, 3));
    if (c.rope == Rope::Flux2) t = ops::rope_flux2(flux_ids(Lk, 4));
    a.rope_cos = t.cos;
    a.rope_sin = t.sin;
  }
  a.causal = c.causal;
  if (c.padding) {
    // Batch element b keeps its first Lk - (b + 1) * Lk / 5 keys; with B = 5 the last one keeps none.
    std::vector<float> m(B * Lk);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < Lk; ++j) m[b * Lk + j] = j < Lk - (b + 1) * Lk / 5 ? 1.0f : 0.0f;
    a.key_padding_mask = Tensor::from_vector(m, {B, Lk}, DType::U8);
  }
  if (c.bias) {
    // T5-like: per head and relative offset, [1, H, Lq, Lk], unscaled scores.
    std::vector<float> bias(H * Lq * Lk);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t j = 0; j < Lk; ++j)
          bias[(h * Lq + i) * Lk + j] = 2.0f * std::sin(0.37f * static_cast<float>(j - i) + static_cast<float>(h));
    a.bias = Tensor::from_vector(bias, {1, H, Lq, Lk}, DType::F32);
    a.scale = 1.0f;
  }
  return p;
}

// The f64 oracle for query rows [r0, r1) (other rows are zero), as an f64 [B, Lq, H, D] tensor.
inline Tensor oracle(const AttentionArgs& a, int64_t r0, int64_t r1) {
  AttentionArgs r = a;
  r.out = Tensor::zeros(a.q.shape(), DType::F64);
  backend::ref::attention_rows(r, r0, r1);
  return r.out;
}

inline float round_to_dtype(float x, DType dt) {
  if (dt == DType::BF16) return bf16_to_f32(f32_to_bf16(x));
  if (dt == DType::F16) return f16_to_f32(f32_to_f16(x));
  return x;
}

// What a straightforward framework implementation in the tensor dtype computes (PyTorch's math
// SDPA path): rotated q/k rounded to the dtype, scores accumulated in f32 and rounded, softmax in
// f32 rounded, P·V accumulated in f32 and rounded. Rows [r0, r1) only, as f64 [B, Lq, H, D].
inline Tensor naive_same_dtype(const AttentionArgs& a, int64_t r0, int64_t r1) {
  const int64_t B = a.q.size(0), Lq = a.q.size(1), H = a.q.size(2), D = a.q.size(3);
  const int64_t Lk = a.k.size(1), Hkv = a.k.size(2), group = H / Hkv;
  const DType dt = a.q.dtype();
  const std::vector<float> qv = a.q.contiguous().to_vector(), kv = a.k.contiguous().to_vector(),
                           vv = a.v.contiguous().to_vector();
  const std::vector<float> cs = a.rope_cos.defined() ? a.rope_cos.contiguous().to_vector() : std::vector<float>{};
  const std::vector<float> sn = a.rope_sin.defined() ? a.rope_sin.contiguous().to_vector() : std::vector<float>{};
  const std::vector<float> bias = a.bias.defined() ? a.bias.contiguous().to_vector() : std::vector<float>{};
  const std::vector<float> mask =
      a.key_padding_mask.defined() ? a.key_padding_mask.contiguous().to_vector() : std::vector<float>{};
  auto rotate = [&](std::vector<float>& x, int64_t pos) {
    if (a.rope == RopeLayout::None) return;
    const int64_t half = D / 2;
    for (int64_t j = 0; j < half; ++j) {
      const float c = cs[pos * half + j], s = sn[pos * half + j];
      const int64_t ia = a.rope == RopeLayout::AdjacentPairs ? 2 * j : j;
      const int64_t ib = a.rope == RopeLayout::AdjacentPairs ? 2 * j + 1 : j + half;
      const float xa = x[ia], xb = x[ib];
      x[ia] = xa * c - xb * s;
      x[ib] = xb * c + xa * s;
    }
    for (auto& e : x) e = round_to_dtype(e, dt);
  };
  Tensor out = Tensor::zeros({B, Lq, H, D}, DType::F64);
  double* o = out.data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / group;
      std::vector<std::vector<float>> K(Lk, std::vector<float>(D));
      for (int64_t j = 0; j < Lk; ++j) {
        for (int64_t d = 0; d < D; ++d) K[j][d] = kv[((b * Lk + j) * Hkv + kvh) * D + d];
        rotate(K[j], j);
      }
#pragma omp parallel for
      for (int64_t i = r0; i < r1; ++i) {
        std::vector<float> qr(D), s(Lk), p(Lk);
        for (int64_t d = 0; d < D; ++d) qr[d] = qv[((b * Lq + i) * H + h) * D + d];
        rotate(qr, i + Lk - Lq);
        float mx = -INFINITY;
        std::vector<char> valid(Lk, 1);
        for (int64_t j = 0; j < Lk; ++j) {
          if (a.causal && j > i + Lk - Lq) valid[j] = 0;
          if (!mask.empty() && mask[b * Lk + j] == 0) valid[j] = 0;
          if (!valid[j]) continue;
          float acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += qr[d] * K[j][d];
          acc = round_to_dtype(round_to_dtype(acc, dt) * a.scale, dt);
          if (!bias.empty()) {
            const int64_t bh = a.bias.size(1) == 1 ? 0 : h;
            acc = round_to_dtype(acc + bias[(bh * Lq + i) * Lk + j], dt);
          }
          s[j] = acc;
          mx = std::max(mx, acc);
        }
        float sum = 0;
        for (int64_t j = 0; j < Lk; ++j) {
          p[j] = valid[j] ? std::exp(s[j] - mx) : 0.0f;
          sum += p[j];
        }
        for (int64_t j = 0; j < Lk; ++j) p[j] = sum > 0 ? round_to_dtype(p[j] / sum, dt) : 0.0f;
        std::vector<float> acc(D, 0.0f);  // per d, summed over j in order
        for (int64_t j = 0; j < Lk; ++j) {
          if (p[j] == 0.0f) continue;
          const float* vr = vv.data() + ((b * Lk + j) * Hkv + kvh) * D;
          for (int64_t d = 0; d < D; ++d) acc[d] += p[j] * vr[d];
        }
        for (int64_t d = 0; d < D; ++d) o[((b * Lq + i) * H + h) * D + d] = round_to_dtype(acc[d], dt);
      }
    }
  return out;
}

struct Err {
  double nmse = 0;    // sum (x - ref)^2 / sum ref^2
  double rms = 0;     // sqrt(mean (x - ref)^2)
  double maxabs = 0;
  bool finite = true;
};

// Error of x (any dtype, [B, Lq, H, D]) against the f64 oracle over rows [r0, r1).
inline Err error_vs(const Tensor& x, const Tensor& ref, int64_t r0, int64_t r1) {
  const int64_t B = ref.size(0), Lq = ref.size(1), H = ref.size(2), D = ref.size(3);
  const Tensor xc = x.contiguous().to(DType::F64);
  const double* xp = xc.data<double>();
  const double* rp = ref.data<double>();
  double se = 0, sr = 0;
  int64_t n = 0;
  Err e;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t hd = 0; hd < H * D; ++hd) {
        const int64_t idx = (b * Lq + i) * H * D + hd;
        const double diff = xp[idx] - rp[idx];
        if (!std::isfinite(xp[idx])) e.finite = false;
        se += diff * diff;
        sr += rp[idx] * rp[idx];
        e.maxabs = std::max(e.maxabs, std::fabs(diff));
        ++n;
      }
  e.nmse = sr > 0 ? se / sr : se;
  e.rms = n ? std::sqrt(se / static_cast<double>(n)) : 0;
  return e;
}

// Runs the CPU kernel once and checks query rows [r0, r1) of each range with the numerics.md rules
// (tests/support/compare.h): f32 NMSE <= 1e-7 against the f64 oracle; half types at most 2x the
// NMSE of the naive same-dtype implementation.
inline void check_case(const Case& c, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                       uint32_t seed = 1234, const backend::cpu::AttentionCpuOptions& options = {}) {
  Problem p = make_problem(c, seed);
  ops::validate_attention(p.args);  // the kernel trusts the front end's checks
  backend::cpu::AttentionCpuStats stats;
  backend::cpu::attention(p.args, options, &stats);
  for (auto [r0, r1] : ranges) {
    SCOPED_TRACE("query rows " + std::to_string(r0) + ".." + std::to_string(r1));
    const Tensor ref = oracle(p.args, r0, r1).slice(1, r0, r1);
    const Tensor got = p.args.out.slice(1, r0, r1);
    if (c.dtype == DType::F32) {
      EXPECT_TRUE(test::all_close(got, ref, test::TolClass::Attention));
    } else {
      const Tensor naive = naive_same_dtype(p.args, r0, r1).slice(1, r0, r1);
      EXPECT_TRUE(test::attention_close(got, naive, ref));
    }
  }
  switch (c.expect) {
    case Expect::Any: break;
    case Expect::FixedOnly: EXPECT_EQ(stats.fixed_blocks, stats.blocks); break;
    case Expect::AllFallback: EXPECT_EQ(stats.fallback_blocks, stats.blocks); break;
    case Expect::SomeFallback:
      EXPECT_GT(stats.fallback_blocks, 0);
      EXPECT_GT(stats.fixed_blocks, 0);
      break;
    case Expect::OnlineOnly: EXPECT_EQ(stats.online_blocks, stats.blocks); break;
  }
  ::testing::Test::RecordProperty("fallback_blocks", static_cast<int>(stats.fallback_blocks));
}

inline void check_case(const Case& c) { check_case(c, {{0, c.Lq}}); }

// Options that run the oneDNN implementation on a case: bf16 inputs with the bf16 roundings of
// its bf16 compute type (native where oneDNN has bf16, emulated in f32 elsewhere), other dtypes
// in f32.
inline backend::cpu::AttentionCpuOptions onednn_options(const Case& c) {
  backend::cpu::AttentionCpuOptions o;
  o.impl = backend::cpu::AttentionCpuImpl::OneDnn;
  o.emulate_bf16 = c.dtype == DType::BF16;
  return o;
}

}  // namespace fluxrt::test_attention
