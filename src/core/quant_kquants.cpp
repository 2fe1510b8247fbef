// The K-quant writers: one 256-value super-block of Q2_K, Q3_K, Q4_K, Q5_K or Q6_K from f32.
//
// The goal is the bytes llama.cpp / ggml write with their scalar reference quantizers
// (quantize_row_q*_K_ref, no importance matrix), so that a file made here compares equal to one
// made by llama-quantize's reference path or stable-diffusion.cpp. The algorithms (which search,
// which weights, which step sizes) are ggml's; the code is this project's own. Byte equality
// needs the same f32 operations in the same order, so:
//   - every expression keeps ggml's association, e.g. (w * x) * l, never w * (x * l);
//   - this file is compiled with -ffp-contract=off (CMakeLists.txt): a fused multiply-add would
//     round differently (the target is a build without FMA contraction, as a stock x86-64
//     llama.cpp's ggml-base is; see tools/reference/dump_kquants.py);
//   - integers are rounded with ggml's nearest_int (below), and the f16 super-block scales with
//     f32_to_f16 (round to nearest even, as ggml's conversion).
// Block layouts are listed at the top of quant.cpp; tests/unit/test_quant_kquants.cpp checks the
// bytes against tools/reference/dump_kquants.py's output of ggml's own code.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/quant.h"

namespace fluxrt::quant_detail {
namespace {

constexpr int kBlock = 256;
// ggml treats a group whose largest magnitude is below this as all zeros.
constexpr float kGroupEps = 1e-15f;

// Round to nearest, ties to even, as ggml does it: adding 1.5 * 2^23 puts the integer part of
// v in the low 22 mantissa bits of the f32 sum (the FPU rounds the addition). It equals
// lrintf(v) for |v| < 2^22; beyond that (which ggml never expects) it wraps exactly as ggml's,
// so the bytes still agree.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  return (bits & 0x007FFFFF) - 0x00400000;
}

inline uint16_t to_f16(float v) { return f32_to_f16(v); }
inline float from_f16(uint16_t h) { return f16_to_f32(h); }

inline void store_f16(uint8_t* p, float v) {
  const uint16_t h = to_f16(v);
  std::memcpy(p, &h, 2);
}

// The f32 value a scale takes once stored as f16 (the requantization uses what a reader sees).
inline float stored_f16(float v) { return from_f16(to_f16(v)); }

// Asymmetric fit of a group (ggml's make_qkx2_quants): x[i] ~ scale * L[i] - m, L in [0, nmax],
// m >= 0 (the group's minimum, clamped to at most 0, is what is subtracted). It starts from the
// min/max grid and tries nstep + 1 rescaled grids (nmax + rmin + rdelta * k steps over the
// range); for each it solves weighted least squares for scale and min and keeps the one with the
// smallest weighted error (absolute error when abs_error, else squared). Returns the scale and
// writes m to *m_out; L gets the chosen levels; aux is scratch of n levels.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* m_out, uint8_t* aux,
                    float rmin, float rdelta, int nstep, bool abs_error) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;  // the offset only ever lowers the grid: a positive group starts at 0
  if (hi == lo) {
    std::fill(L, L + n, uint8_t{0});
    *m_out = -lo;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (hi - lo);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - lo));
    L[i] = static_cast<uint8_t>(std::clamp(l, 0, nmax));
    float diff = scale * static_cast<float>(L[i]) + lo - x[i];
    diff = abs_error ? std::fabs(diff) : diff * diff;
    best_error += w[i] * diff;
  }
  // Note: `lo` becomes the best fit's min as the search goes, and later grids start from it (as
  // in ggml; hi - lo is then not the range any more).
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (hi - lo);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0f)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {  // a positive offset is not representable: refit the scale alone
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0.0f;
    for (int i = 0; i < n; ++i) {
      float diff = this_scale * static_cast<float>(aux[i]) + this_min - x[i];
      diff = abs_error ? std::fabs(diff) : diff * diff;
      error += w[i] * diff;
    }
    if (error < best_error) {
      std::copy(aux, aux + n, L);
      best_error = error;
      scale = this_scale;
      lo = this_min;
    }
  }
  *m_out = -lo;
  return scale;
}

// The value of largest magnitude (the first on ties) and that magnitude.
inline float signed_max(const float* x, int n, float* amax_out) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  *amax_out = amax;
  return max;
}

// Symmetric fit for Q6_K (ggml's make_qx_quants with x^2 weights): x[i] ~ scale * (L[i] - nmax),
// L - nmax in [-nmax, nmax - 1]. The grid is anchored at the signed largest value (mapped to
// -nmax, so the asymmetric end of the range goes where it is needed); 18 nearby anchors
// -(nmax + 0.1 k) / max are tried and the one with the largest sumlx^2 / suml2 (the least x^2-
// weighted squared error at its optimal scale) wins.
float fit_symmetric_q6(const float* x, int8_t* L) {
  constexpr int n = 16, nmax = 32;
  float amax;
  const float max = signed_max(x, n, &amax);
  if (amax < kGroupEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float wt = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += wt * x[i] * fl;
    suml2 += wt * fl * fl;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float fl = static_cast<float>(std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      const float wt = x[i] * x[i];
      sumlx += wt * x[i] * fl;
      suml2 += wt * fl * fl;
    }
    // sumlx^2 / suml2 > best, written without the division (as ggml compares it).
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        L[i] = static_cast<int8_t>(nmax + std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric fit for Q3_K (ggml's make_q3_quants with x^2 weights): start from the grid anchored
// at the signed largest value (-> -nmax), then up to 5 passes of coordinate descent that move one
// level at a time to where it is best given the others, keeping a move only if it raises
// sumlx^2 / suml2. Returns the optimal scale sumlx / suml2; L gets level + nmax.
float fit_symmetric_q3(const float* x, int8_t* L) {
  constexpr int n = 16, nmax = 4;
  float amax;
  const float max = signed_max(x, n, &amax);
  if (amax < kGroupEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float wt = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += wt * x[i] * fl;
    suml2 += wt * fl * fl;
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float wt = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      // The sums without value i; its best level is then x * sl2 / slx.
      float slx = sumlx - wt * x[i] * li;
      if (!(slx > 0)) continue;
      float sl2 = suml2 - wt * li * li;
      const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (new_l == L[i]) continue;
      const float fl = static_cast<float>(new_l);
      slx += wt * x[i] * fl;
      sl2 += wt * fl * fl;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(new_l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Packs 2-bit levels as Q2_K / Q3_K store them: value h*128 + s*32 + l in bits 2s of qs[h*32 + l].
template <typename Level>
void pack_2bit(const Level* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const Level* v = L + h * 128 + l;
      qs[h * 32 + l] = static_cast<uint8_t>(v[0] | (v[32] << 2) | (v[64] << 4) | (v[96] << 6));
    }
}

// The 6-bit scale and min of group j from the 12 packed bytes of Q4_K / Q5_K.
inline void unpack_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 0x3F;
    *mn = s[j + 4] & 0x3F;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K and Q5_K share everything but the level count and the search: 8 groups of 32, each fitted
// with scale and min, both then quantized to 6 bits against the block's largest (d, dmin in f16),
// and the values requantized against the scales as stored. Writes d, dmin, the 12 scale bytes
// at b and the levels to L.
void fit_q4_q5(const float* x, uint8_t* b, uint8_t* L, int nmax, float rmin, int nstep) {
  float scales[8], mins[8], weights[32];
  uint8_t aux[32];
  float max_scale = 0.0f, max_min = 0.0f;  // the min is subtracted, so both are >= 0
  for (int j = 0; j < 8; ++j) {
    const float* xg = x + 32 * j;
    // Weights |x| + rms(group): large values matter more, but small ones are not ignored.
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xg[l] * xg[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xg[l]);
    scales[j] = fit_scale_min(32, nmax, xg, weights, L + 32 * j, &mins[j], aux, rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t* sc = b + 4;
  for (int j = 0; j < 8; ++j) {
    // uint8 first (a negative fit wraps, as in ggml), then capped at 63.
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    if (j < 4) {
      sc[j] = ls;
      sc[j + 4] = lm;
    } else {  // low nibbles in bytes 8..11, top 2 bits in the spare bits 6..7 of bytes 0..7
      sc[j + 4] = static_cast<uint8_t>((ls & 0x0F) | ((lm & 0x0F) << 4));
      sc[j - 4] = static_cast<uint8_t>(sc[j - 4] | ((ls >> 4) << 6));
      sc[j] = static_cast<uint8_t>(sc[j] | ((lm >> 4) << 6));
    }
  }
  store_f16(b, max_scale / 63.0f);
  store_f16(b + 2, max_min / 63.0f);
  const float d = stored_f16(max_scale / 63.0f), dmin = stored_f16(max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    int s, m;
    unpack_scale_min(sc, j, &s, &m);
    const float dj = d * static_cast<float>(s);
    if (dj == 0.0f) continue;  // keep the fit's levels: they decode to -m either way
    const float mj = dmin * static_cast<float>(m);
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + i] + mj) / dj), 0, nmax));
  }
}

}  // namespace

void quantize_block_q2_k(const float* x, uint8_t* b) {
  uint8_t L[kBlock], aux[16];
  float weights[16], scales[16], mins[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 16; ++j) {
    // Weights |x|, absolute error, and a search over 16 grids from nmax - 0.5 upward.
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = fit_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], aux, -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  uint8_t* sc = b;  // low nibble: scale, high nibble: min, both 4-bit against d, dmin
  if (max_scale > 0) {
    const float iscale = 15.0f / max_scale;
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
    store_f16(b + 80, max_scale / 15.0f);
  } else {
    std::memset(sc, 0, 16);
    store_f16(b + 80, 0.0f);
  }
  if (max_min > 0) {
    const float iscale = 15.0f / max_min;
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(sc[j] | (nearest_int(iscale * mins[j]) << 4));
    store_f16(b + 82, max_min / 15.0f);
  } else {
    store_f16(b + 82, 0.0f);
  }
  uint16_t dh, mh;
  std::memcpy(&dh, b + 80, 2);
  std::memcpy(&mh, b + 82, 2);
  for (int j = 0; j < 16; ++j) {
    const float d = from_f16(dh) * static_cast<float>(sc[j] & 0x0F);
    if (d == 0.0f) continue;
    const float dm = from_f16(mh) * static_cast<float>(sc[j] >> 4);
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[16 * j + i] + dm) / d), 0, 3));
  }
  pack_2bit(L, b + 16);
}

void quantize_block_q3_k(const float* x, uint8_t* b) {
  int8_t L[kBlock];
  float scales[16];
  float max_scale = 0.0f, amax = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric_q3(x + 16 * j, L + 16 * j);
    const float a = std::fabs(scales[j]);
    if (a > amax) {
      amax = a;
      max_scale = scales[j];
    }
  }
  uint8_t* hmask = b;
  uint8_t* qs = b + 32;
  uint8_t* sc = b + 96;
  std::memset(sc, 0, 12);
  if (max_scale != 0.0f) {
    // Signed 6-bit scales (stored + 32): the signed largest maps to -32, as the levels do.
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      const auto l0 = static_cast<int8_t>(nearest_int(iscale * scales[j]));
      const int l = std::clamp(static_cast<int>(l0), -32, 31) + 32;
      if (j < 8)
        sc[j] = static_cast<uint8_t>(l & 0x0F);
      else
        sc[j - 8] = static_cast<uint8_t>(sc[j - 8] | ((l & 0x0F) << 4));
      sc[8 + j % 4] = static_cast<uint8_t>(sc[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
    }
    store_f16(b + 108, 1.0f / iscale);
  } else {
    store_f16(b + 108, 0.0f);
  }
  uint16_t dh;
  std::memcpy(&dh, b + 108, 2);
  for (int j = 0; j < 16; ++j) {
    const int low = (j < 8 ? sc[j] : sc[j - 8] >> 4) & 0x0F;
    const int s = (low | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
    const float d = from_f16(dh) * static_cast<float>(s);
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
  }
  // Levels 0..7: bit 2 goes to hmask (value i -> bit i/32 of hmask[i%32]), the low 2 bits to qs.
  std::memset(hmask, 0, 32);
  for (int i = 0; i < kBlock; ++i) {
    if (L[i] > 3) {
      hmask[i % 32] = static_cast<uint8_t>(hmask[i % 32] | (1u << (i / 32)));
      L[i] = static_cast<int8_t>(L[i] - 4);
    }
  }
  pack_2bit(L, qs);
}

void quantize_block_q4_k(const float* x, uint8_t* b) {
  uint8_t L[kBlock];
  // 16 levels; squared error; grids from nmax - 1 in 21 steps of 0.1.
  fit_q4_q5(x, b, L, 15, -1.0f, 20);
  uint8_t* qs = b + 16;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      qs[c * 32 + l] = static_cast<uint8_t>(L[c * 64 + l] | (L[c * 64 + l + 32] << 4));
}

void quantize_block_q5_k(const float* x, uint8_t* b) {
  uint8_t L[kBlock];
  // 32 levels; squared error; grids from nmax - 0.5 in 16 steps of 0.1.
  fit_q4_q5(x, b, L, 31, -0.5f, 15);
  uint8_t* qh = b + 16;
  uint8_t* qs = b + 48;
  std::memset(qh, 0, 32);
  // Group g = value / 32 puts its fifth bit in bit g of qh[value % 32]; low nibbles as Q4_K.
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int lo = L[c * 64 + l], hi = L[c * 64 + l + 32];
      qh[l] = static_cast<uint8_t>(qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      qs[c * 32 + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
    }
}

void quantize_block_q6_k(const float* x, uint8_t* b) {
  int8_t L[kBlock];
  float scales[16];
  float max_scale = 0.0f, max_abs = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric_q6(x + 16 * j, L + 16 * j);
    const float a = std::fabs(scales[j]);
    if (a > max_abs) {
      max_abs = a;
      max_scale = scales[j];
    }
  }
  if (max_abs < kGroupEps) {  // nothing to represent: an all-zero block (d = 0)
    std::memset(b, 0, 210);
    return;
  }
  // Signed 8-bit scales; the signed largest maps to -128.
  const float iscale = -128.0f / max_scale;
  store_f16(b + 208, 1.0f / iscale);
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[j])));
  uint16_t dh;
  std::memcpy(&dh, b + 208, 2);
  for (int j = 0; j < 16; ++j) {
    const float d = from_f16(dh) * static_cast<float>(sc[j]);
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
  }
  // Levels 0..63: value c*128 + s*64 + l (l < 64) -> nibble s of ql[c*64 + l]; value
  // c*128 + t*32 + l (l < 32) -> bits 2t of qh[c*32 + l] take its top two bits.
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int c = 0; c < 2; ++c) {
    const int8_t* v = L + c * 128;
    for (int l = 0; l < 32; ++l) {
      ql[c * 64 + l] = static_cast<uint8_t>((v[l] & 0x0F) | ((v[l + 64] & 0x0F) << 4));
      ql[c * 64 + l + 32] = static_cast<uint8_t>((v[l + 32] & 0x0F) | ((v[l + 96] & 0x0F) << 4));
      qh[c * 32 + l] = static_cast<uint8_t>((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) |
                                            ((v[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace fluxrt::quant_detail
