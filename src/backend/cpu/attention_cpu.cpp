// CPU attention (see attention_cpu.h). This file is compiled once per Highway target through
// foreach_target.h; the target-independent parts (the driver with its OpenMP loops, row loads,
// RoPE, key preparation) sit behind FLUXRT_ATTENTION_CPU_SHARED / HWY_ONCE so they exist once,
// compiled for the baseline ISA. OpenMP regions stay out of target-attributed code on purpose.
#include "backend/cpu/attention_cpu.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/attention_onednn.h"
#include "backend/cpu/attention_rows.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/threads.h"

// SSSE3 adds nothing over SSE4 here; SVE vectors cannot live in arrays (the micro-kernels keep
// their accumulators in arrays), so ARM builds use NEON.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/attention_cpu.cpp"
// clang-format off (foreach_target.h must come first)
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
// clang-format on
// Per-target helpers, after the Highway headers:
#include "backend/cpu/attention_exp2-inl.h"

#ifndef FLUXRT_ATTENTION_CPU_SHARED
#define FLUXRT_ATTENTION_CPU_SHARED
namespace fluxrt::backend::cpu::detail {

constexpr int64_t kBlockM = 48;  // query rows per work item (multiple of every target's kMR)
constexpr int64_t kBlockN = 64;  // keys per tile (multiple of 2 x the widest vector)
// Row strides of the per-block buffers are padded by one cache line: with power-of-two strides
// (256 B for a score row, 512 B for a D = 128 row) the rows a micro-kernel walks map to 1/4 or 1/8
// of the L1 sets and evict each other.
constexpr int64_t kLdS = kBlockN + 16;  // score/probability rows
// Everything a query block needs, fixed for one (batch, kv head).
struct Ctx : AttentionShape {
  const AttentionArgs* a = nullptr;
  int64_t Dp = 0;
  int64_t ld = 0;               // row stride of the q and o blocks: Dp + 16
  int64_t kw = 0;               // panel width of the packed key/value tiles: 2 vectors
  int64_t ntiles = 0, nqblocks = 0;
  float c = 0;                  // scale * log2(e), folded into the rotated q
  bool online_only = false;     // bias or forced: skip the fixed-maximum pass
  bool own_q_table = false;
  int64_t q_pos_offset = 0;     // table row of query i is i + q_pos_offset
  int64_t causal_offset = 0;    // query i sees keys j <= i + causal_offset
  // Packed like GEMM panels so each micro-kernel call streams one contiguous block:
  const float* kt = nullptr;    // [ntiles][kBlockN / kw][Dp][kw] rotated keys (transposed), zero padded
  const float* v = nullptr;     // [ntiles][Dp / kw][kBlockN][kw] values, zero padded
  const float* maskadd = nullptr;        // [ntiles * kBlockN] 0 or -inf (padding mask, j >= Lk)
  const uint8_t* tile_masked = nullptr;  // [ntiles] tile has any -inf in maskadd
  bool batch_has_keys = true;   // at least one key of this batch element is not masked
  float kmax = 0;               // max_j |k_j| over unmasked keys
};

// Per-thread buffers.
struct Scratch {
  hwy::AlignedFreeUniquePtr<float[]> q, o, s, m, l, row, brow;
  explicit Scratch(int64_t ld)
      : q(hwy::AllocateAligned<float>(kBlockM * ld)),
        o(hwy::AllocateAligned<float>(kBlockM * ld)),
        s(hwy::AllocateAligned<float>(kBlockM * kLdS)),
        m(hwy::AllocateAligned<float>(kBlockM)),
        l(hwy::AllocateAligned<float>(kBlockM)),
        row(hwy::AllocateAligned<float>(ld)),
        brow(hwy::AllocateAligned<float>(kBlockN)) {}
};

// Rotates and transposes key tile `t` of (b, kvh) into ctx.kt, copies the values into ctx.v and
// returns max |k_j| over the tile's unmasked keys.
inline float prepare_kv_tile(const Ctx& c, float* kt, float* v, int64_t b, int64_t kvh, int64_t t, float* row) {
  const AttentionArgs& a = *c.a;
  const int64_t Dp = c.Dp, D = c.D, kw = c.kw;
  float* ktile = kt + t * Dp * kBlockN;
  float* vtile = v + t * kBlockN * Dp;
  float kmax = 0;
  std::fill(row + D, row + Dp, 0.0f);  // load_row writes [0, D) only, so the padding stays zero
  for (int64_t jj = 0; jj < kBlockN; ++jj) {
    const int64_t j = t * kBlockN + jj;
    float* kcol = ktile + (jj / kw) * Dp * kw + jj % kw;  // element d at kcol[d * kw]
    float* vrow = vtile + jj * kw;                         // dims [dc, dc + kw) at vrow + dc * kBlockN
    if (j >= c.Lk) {
      for (int64_t d = 0; d < Dp; ++d) kcol[d * kw] = 0.0f;
      for (int64_t dc = 0; dc < Dp; dc += kw) std::memset(vrow + dc * kBlockN, 0, kw * sizeof(float));
      continue;
    }
    load_row(a.k, off4(a.k, b, j, kvh), row, D);
    if (a.rope != RopeLayout::None)
      rope_rotate_row(row, D, a.rope, rope_table_row(a.rope_cos, b, j), rope_table_row(a.rope_sin, b, j));
    double norm2 = 0;
    for (int64_t d = 0; d < D; ++d) norm2 += static_cast<double>(row[d]) * row[d];
    for (int64_t d = 0; d < Dp; ++d) kcol[d * kw] = row[d];
    if (c.maskadd[j] == 0.0f) kmax = std::max(kmax, static_cast<float>(std::sqrt(norm2)));
    load_row(a.v, off4(a.v, b, j, kvh), row, D);
    for (int64_t dc = 0; dc < Dp; dc += kw) std::memcpy(vrow + dc * kBlockN, row + dc, kw * sizeof(float));
  }
  return kmax;
}

struct BlockStats {
  int64_t blocks = 0, fixed = 0, fallback = 0, online = 0;
};

}  // namespace fluxrt::backend::cpu::detail
#endif  // FLUXRT_ATTENTION_CPU_SHARED

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace fluxrt::backend::cpu::detail;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Rows per micro-kernel call: 6 x 2 accumulators fit the 16 AVX2/SSE registers with room for the
// two key/value vectors and a broadcast; AVX-512 has 32 registers, so 12 x 2.
#if HWY_TARGET <= HWY_AVX3 && HWY_ARCH_X86
constexpr int64_t kMR = 12;
#else
constexpr int64_t kMR = 6;
#endif
static_assert(kBlockM % kMR == 0, "query block must be a multiple of the micro-kernel rows");

size_t TargetLanes() { return hn::Lanes(DF()); }
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

// S[kMR, 2N] block at column `col` of the tile: S = Q · Kt (Q rows of stride ldq; kt is the
// [Dp][2N] panel of those columns).
HWY_INLINE void QkMicro(DF d, const float* HWY_RESTRICT q, int64_t ldq, int64_t Dp, const float* HWY_RESTRICT kt,
                        float* HWY_RESTRICT s, int64_t col) {
  const size_t N = hn::Lanes(d);
  VF acc0[kMR], acc1[kMR];
  for (int64_t r = 0; r < kMR; ++r) {
    acc0[r] = hn::Zero(d);
    acc1[r] = hn::Zero(d);
  }
  const float* kp = kt;
  for (int64_t k = 0; k < Dp; ++k, kp += 2 * N) {
    const VF k0 = hn::LoadU(d, kp);
    const VF k1 = hn::LoadU(d, kp + N);
    for (int64_t r = 0; r < kMR; ++r) {
      const VF qv = hn::Set(d, q[r * ldq + k]);
      acc0[r] = hn::MulAdd(qv, k0, acc0[r]);
      acc1[r] = hn::MulAdd(qv, k1, acc1[r]);
    }
  }
  for (int64_t r = 0; r < kMR; ++r) {
    hn::StoreU(acc0[r], d, s + r * kLdS + col);
    hn::StoreU(acc1[r], d, s + r * kLdS + col + N);
  }
}

// O[kMR, 2N] block at column `col` += P[kMR, nkeys] · V[nkeys, col : col + 2N] (v is the
// [kBlockN][2N] panel of those columns; o rows of stride ld).
HWY_INLINE void PvMicro(DF d, const float* HWY_RESTRICT p, const float* HWY_RESTRICT v, int64_t ld,
                        float* HWY_RESTRICT o, int64_t col, int64_t nkeys) {
  const size_t N = hn::Lanes(d);
  VF acc0[kMR], acc1[kMR];
  for (int64_t r = 0; r < kMR; ++r) {
    acc0[r] = hn::LoadU(d, o + r * ld + col);
    acc1[r] = hn::LoadU(d, o + r * ld + col + N);
  }
  const float* vp = v;
  for (int64_t j = 0; j < nkeys; ++j, vp += 2 * N) {
    const VF v0 = hn::LoadU(d, vp);
    const VF v1 = hn::LoadU(d, vp + N);
    for (int64_t r = 0; r < kMR; ++r) {
      const VF pv = hn::Set(d, p[r * kLdS + j]);
      acc0[r] = hn::MulAdd(pv, v0, acc0[r]);
      acc1[r] = hn::MulAdd(pv, v1, acc1[r]);
    }
  }
  for (int64_t r = 0; r < kMR; ++r) {
    hn::StoreU(acc0[r], d, o + r * ld + col);
    hn::StoreU(acc1[r], d, o + r * ld + col + N);
  }
}

// One pass over the visible key tiles for query rows [i0, i0 + bm) of head h.
// online == false: fixed row maximum m (already in sc.m); online == true: running maximum.
void BlockPass(const Ctx& c, int64_t b, int64_t h, int64_t i0, int64_t bm, Scratch& sc, bool online) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const AttentionArgs& a = *c.a;
  const int64_t Dp = c.Dp, ld = c.ld;
  const int64_t bmr = (bm + kMR - 1) / kMR * kMR;
  float* HWY_RESTRICT qs = sc.q.get();
  float* HWY_RESTRICT o = sc.o.get();
  float* HWY_RESTRICT s = sc.s.get();
  float* HWY_RESTRICT m = sc.m.get();
  float* HWY_RESTRICT l = sc.l.get();
  std::fill(o, o + bmr * ld, 0.0f);
  std::fill(l, l + kBlockM, 0.0f);
  if (online) std::fill(m, m + kBlockM, -std::numeric_limits<float>::infinity());

  int64_t tile_end = c.ntiles;
  if (a.causal) {
    const int64_t last_key = i0 + bm - 1 + c.causal_offset;
    tile_end = last_key < 0 ? 0 : std::min(c.ntiles, last_key / kBlockN + 1);
  }
  const bool has_bias = a.bias.defined();
  const VF neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());

  for (int64_t t = 0; t < tile_end; ++t) {
    const int64_t j0 = t * kBlockN;
    const float* ktile = c.kt + t * Dp * kBlockN;
    // Column chunk outer: its slice of the key tile (Dp x 2N floats) stays in L1 for every row group.
    for (int64_t col = 0; col < kBlockN; col += 2 * N)
      for (int64_t r0 = 0; r0 < bmr; r0 += kMR)
        QkMicro(d, qs + r0 * ld, ld, Dp, ktile + col * Dp, s + r0 * kLdS, col);

    const bool use_maskadd = c.tile_masked[t] != 0;
    const float* madd = c.maskadd + j0;
    for (int64_t r = 0; r < bmr; ++r) {
      float* HWY_RESTRICT srow = s + r * kLdS;
      int64_t lim = kBlockN;  // columns [lim, kBlockN) are hidden by the causal mask
      if (a.causal) lim = std::clamp<int64_t>(i0 + r + c.causal_offset - j0 + 1, 0, kBlockN);
      if (r >= bm || lim == 0) {
        std::fill(srow, srow + kBlockN, 0.0f);
        continue;
      }
      if (!online) {
        const VF mv = hn::Set(d, m[r]);
        VF sum = hn::Zero(d);
        for (int64_t jj = 0; jj < kBlockN; jj += N) {
          VF x = hn::LoadU(d, srow + jj);
          if (use_maskadd) x = hn::Add(x, hn::LoadU(d, madd + jj));
          VF p = AttentionExp2(d, hn::Sub(x, mv));
          if (jj + N > lim) p = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(std::max<int64_t>(lim - jj, 0))), p);
          hn::StoreU(p, d, srow + jj);
          sum = hn::Add(sum, p);
        }
        l[r] += hn::GetLane(hn::SumOfLanes(d, sum));
        continue;
      }
      // Online maximum: scores in log2 units plus bias and masks, then rescale the row.
      const float* brow = nullptr;
      if (has_bias) {
        const Tensor& bt = a.bias;
        auto idx = [&](int dim, int64_t v) { return bt.size(dim) == 1 ? 0 : v * bt.stride(dim); };
        const float* bb = bt.data<float>() + idx(0, b) + idx(1, h) + idx(2, i0 + r);
        const int64_t bs = bt.size(3) == 1 ? 0 : bt.stride(3);
        const int64_t nvalid = std::min<int64_t>(kBlockN, c.Lk - j0);
        float* tmp = sc.brow.get();
        for (int64_t jj = 0; jj < kBlockN; ++jj)
          tmp[jj] = jj < nvalid ? static_cast<float>(bb[(j0 + jj) * bs] * kLog2e) : 0.0f;
        brow = tmp;
      }
      VF vmax = neg_inf;
      for (int64_t jj = 0; jj < kBlockN; jj += N) {
        VF x = hn::LoadU(d, srow + jj);
        if (brow) x = hn::Add(x, hn::LoadU(d, brow + jj));
        if (use_maskadd) x = hn::Add(x, hn::LoadU(d, madd + jj));
        if (jj + N > lim)
          x = hn::IfThenElse(hn::FirstN(d, static_cast<size_t>(std::max<int64_t>(lim - jj, 0))), x, neg_inf);
        hn::StoreU(x, d, srow + jj);
        vmax = hn::Max(vmax, x);
      }
      const float tile_max = hn::GetLane(hn::MaxOfLanes(d, vmax));
      const float m_new = std::max(m[r], tile_max);
      if (m_new == -std::numeric_limits<float>::infinity()) {
        std::fill(srow, srow + kBlockN, 0.0f);
        continue;
      }
      const float alpha = m[r] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp2(m[r] - m_new);
      m[r] = m_new;
      const VF mv = hn::Set(d, m_new);
      VF sum = hn::Zero(d);
      for (int64_t jj = 0; jj < kBlockN; jj += N) {
        const VF p = AttentionExp2(d, hn::Sub(hn::LoadU(d, srow + jj), mv));
        hn::StoreU(p, d, srow + jj);
        sum = hn::Add(sum, p);
      }
      l[r] = l[r] * alpha + hn::GetLane(hn::SumOfLanes(d, sum));
      if (alpha != 1.0f) {
        const VF av = hn::Set(d, alpha);
        float* orow = o + r * ld;
        for (int64_t k = 0; k < Dp; k += N) hn::StoreU(hn::Mul(hn::LoadU(d, orow + k), av), d, orow + k);
      }
    }

    const float* vtile = c.v + j0 * Dp;
    const int64_t nkeys = std::min<int64_t>(kBlockN, c.Lk - j0);
    for (int64_t col = 0; col < Dp; col += 2 * N)
      for (int64_t r0 = 0; r0 < bmr; r0 += kMR)
        PvMicro(d, s + r0 * kLdS, vtile + col * kBlockN, ld, o + r0 * ld, col, nkeys);
  }
}

// Query block `qb` of head h: load + rotate q, fixed-maximum pass, check, exact fallback, store.
void ProcessBlock(const Ctx& c, int64_t b, int64_t h, int64_t qb, Scratch* scratch, BlockStats* st) {
  Scratch& sc = *scratch;
  const AttentionArgs& a = *c.a;
  const int64_t D = c.D, Dp = c.Dp, ld = c.ld;
  const int64_t i0 = qb * kBlockM;
  const int64_t bm = std::min(kBlockM, c.Lq - i0);
  const int64_t bmr = (bm + kMR - 1) / kMR * kMR;
  const Tensor& qcos = c.own_q_table ? a.rope_q_cos : a.rope_cos;
  const Tensor& qsin = c.own_q_table ? a.rope_q_sin : a.rope_sin;
  float* qs = sc.q.get();
  float* m = sc.m.get();
  bool row_has_keys[kBlockM];
  for (int64_t r = 0; r < bmr; ++r) {
    float* qrow = qs + r * ld;
    if (r >= bm) {
      std::fill(qrow, qrow + Dp, 0.0f);
      continue;
    }
    const int64_t i = i0 + r;
    load_row(a.q, off4(a.q, b, i, h), qrow, D);
    if (a.rope != RopeLayout::None) {
      const int64_t pos = i + c.q_pos_offset;
      rope_rotate_row(qrow, D, a.rope, rope_table_row(qcos, b, pos), rope_table_row(qsin, b, pos));
    }
    double norm2 = 0;
    for (int64_t k = 0; k < D; ++k) {
      qrow[k] *= c.c;
      norm2 += static_cast<double>(qrow[k]) * qrow[k];
    }
    std::fill(qrow + D, qrow + Dp, 0.0f);
    // The bound in log2 units: |c q_i| * max_j |k_j| >= c q_i·k_j for every j.
    m[r] = static_cast<float>(std::sqrt(norm2) * static_cast<double>(c.kmax));
    row_has_keys[r] = c.batch_has_keys && !(a.causal && i + c.causal_offset < 0);
  }

  ++st->blocks;
  bool done = false;
  if (!c.online_only) {
    BlockPass(c, b, h, i0, bm, sc, /*online=*/false);
    done = true;
    const float* l = sc.l.get();
    for (int64_t r = 0; r < bm; ++r) {
      const bool ok = std::isfinite(m[r]) && ((l[r] >= kMinRowSum && l[r] <= kMaxRowSum) || (!row_has_keys[r] && l[r] == 0));
      if (!ok) {
        done = false;
        break;
      }
    }
    if (done)
      ++st->fixed;
    else
      ++st->fallback;
  } else {
    ++st->online;
  }
  if (!done) BlockPass(c, b, h, i0, bm, sc, /*online=*/true);

  const float* o = sc.o.get();
  const float* l = sc.l.get();
  float* row = sc.row.get();
  for (int64_t r = 0; r < bm; ++r) {
    const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
    for (int64_t k = 0; k < D; ++k) row[k] = o[r * ld + k] * inv;
    store_row(a.out, off4(a.out, b, i0 + r, h), row, D);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace fluxrt::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fluxrt::backend::cpu {
HWY_EXPORT(TargetLanes);
HWY_EXPORT(ProcessBlock);
HWY_EXPORT(TargetName);

using namespace detail;

namespace {

// Shared by the threads of one call; owned by the calling thread (concurrent callers on other
// threads have their own).
struct CallWorkspace {
  GrowBuffer<float> kt, v, maskadd, tile_kmax;
  GrowBuffer<uint8_t> tile_masked;
};
CallWorkspace& call_workspace() {
  thread_local CallWorkspace ws;
  return ws;
}

// One worker's buffers; the Scratch is rebuilt only for a wider row stride than it has.
struct ThreadScratch {
  std::unique_ptr<Scratch> sc;
  int64_t ld = 0;
  GrowBuffer<float> row, kmax;
  Scratch& scratch(int64_t want_ld) {
    if (!sc || want_ld > ld) {
      sc = std::make_unique<Scratch>(want_ld);
      ld = want_ld;
      scratch_allocation_count().fetch_add(1, std::memory_order_relaxed);
    }
    return *sc;
  }
};
ThreadScratch& thread_scratch() {
  thread_local ThreadScratch ts;
  return ts;
}

}  // namespace

int64_t attention_scratch_allocations() { return scratch_allocation_count().load(std::memory_order_relaxed); }

const char* attention_target_name() {
  return HWY_DYNAMIC_DISPATCH(TargetName)();
}

namespace {

// Read at every call (a getenv per attention call is nothing), as FLUXRT_LINEAR_IMPL is read at
// every prepare, so a test can switch it.
AttentionCpuImpl impl_from_env() {
  const char* v = std::getenv("FLUXRT_ATTENTION_IMPL");
  const std::string_view s = v ? v : "";
  return s == "onednn" ? AttentionCpuImpl::OneDnn
         : s == "simd" ? AttentionCpuImpl::Simd
                       : AttentionCpuImpl::Auto;
}

// Shortest sequences for which Auto picks the matmul primitives: below, a head is too few
// primitive calls to repay their fixed cost and the padding to whole 64-row / 64-key blocks.
constexpr int64_t kOneDnnMinQueries = 128;
constexpr int64_t kOneDnnMinKeys = 256;

}  // namespace

AttentionCpuImpl attention_impl_for(const AttentionArgs& a, const AttentionCpuOptions& options) {
  AttentionCpuImpl want = options.impl;
  if (want == AttentionCpuImpl::Auto) want = impl_from_env();
  if (!attention_onednn_supports(a)) return AttentionCpuImpl::Simd;
  if (want != AttentionCpuImpl::Auto) return want;
  const bool long_enough = a.q.size(1) >= kOneDnnMinQueries && a.k.size(1) >= kOneDnnMinKeys;
  return attention_onednn_uses_bf16(a) && long_enough ? AttentionCpuImpl::OneDnn : AttentionCpuImpl::Simd;
}

std::string describe_attention(const AttentionArgs& a, const AttentionCpuOptions& options) {
  if (attention_impl_for(a, options) == AttentionCpuImpl::OneDnn)
    return attention_onednn_describe(a, options);
  return std::string("simd ") + attention_target_name();
}

void attention(const AttentionArgs& a, const AttentionCpuOptions& options, AttentionCpuStats* stats) {
  if (attention_impl_for(a, options) == AttentionCpuImpl::OneDnn) {
    attention_onednn(a, options, stats);
    return;
  }
  Ctx c;
  static_cast<AttentionShape&>(c) = AttentionShape(a);
  c.a = &a;
  if (c.no_output()) return;
  // Chooses the target before any worker thread calls through the dispatch table.
  const int64_t lanes = static_cast<int64_t>(HWY_DYNAMIC_DISPATCH(TargetLanes)());
  c.Dp = (c.D + 2 * lanes - 1) / (2 * lanes) * (2 * lanes);
  c.ld = c.Dp + 16;
  c.kw = 2 * lanes;
  c.ntiles = (c.Lk + kBlockN - 1) / kBlockN;
  c.nqblocks = (c.Lq + kBlockM - 1) / kBlockM;
  c.c = static_cast<float>(static_cast<double>(a.scale) * kLog2e);
  c.online_only = options.force_online || a.bias.defined();
  c.own_q_table = a.rope_q_cos.defined();
  c.q_pos_offset = c.own_q_table ? 0 : c.Lk - c.Lq;
  c.causal_offset = c.Lk - c.Lq;

  const int64_t lkp = std::max<int64_t>(c.ntiles, 1) * kBlockN;
  const int64_t kt_floats = lkp * c.Dp;  // per kv head
  const int64_t v_floats = lkp * c.Dp;
  // kv heads prepared per round: as many as a 64 MiB scratch for the rotated keys and values
  // holds (every head of a klein layer at L = 1536, 13 at L = 4608), so threads meet at a barrier
  // a few times per call rather than twice per head, and short sequences (text encoders, few
  // query blocks per head) still give every thread work.
  const int nthreads = num_threads();
  const int64_t items_per_head = c.group * c.nqblocks;
  const int64_t budget_heads = (int64_t{64} << 20) / ((kt_floats + v_floats) * int64_t{sizeof(float)});
  const int64_t heads_per_round = std::clamp<int64_t>(budget_heads, 1, c.Hkv);
  // The call's shared buffers belong to the calling thread and every worker keeps its own
  // Scratch: both grow to the largest call seen and are reused, so the steps of a denoising loop
  // (same shapes every time) allocate nothing here.
  CallWorkspace& ws = call_workspace();
  float* kt = ws.kt.get(heads_per_round * kt_floats);
  float* v = ws.v.get(heads_per_round * v_floats);
  float* maskadd = ws.maskadd.get(lkp);
  uint8_t* tile_masked = ws.tile_masked.get(std::max<int64_t>(c.ntiles, 1));
  float* tile_kmax = ws.tile_kmax.get(heads_per_round * std::max<int64_t>(c.ntiles, 1));
  c.maskadd = maskadd;
  c.tile_masked = tile_masked;

  BlockStats total;
#pragma omp parallel num_threads(nthreads)
  {
    ThreadScratch& ts = thread_scratch();
    Scratch& sc = ts.scratch(c.ld);
    BlockStats local;
    float* row = ts.row.get(c.ld);
    float* kmax = ts.kmax.get(heads_per_round);
    for (int64_t b = 0; b < c.B; ++b) {
#pragma omp single
      {
        const float inf = std::numeric_limits<float>::infinity();
        bool any = false;
        for (int64_t j = 0; j < lkp; ++j) {
          bool keep = j < c.Lk;
          if (keep && a.key_padding_mask.defined()) {
            const Tensor& km = a.key_padding_mask;
            keep = static_cast<const uint8_t*>(km.raw_data())[b * km.stride(0) + j * km.stride(1)] != 0;
          }
          maskadd[j] = keep ? 0.0f : -inf;
          any = any || keep;
        }
        for (int64_t t = 0; t < c.ntiles; ++t) {
          tile_masked[t] = 0;
          for (int64_t jj = 0; jj < kBlockN; ++jj) tile_masked[t] |= maskadd[t * kBlockN + jj] != 0.0f;
        }
        c.batch_has_keys = any;
      }  // implicit barrier
      for (int64_t kv0 = 0; kv0 < c.Hkv; kv0 += heads_per_round) {
        const int64_t nh = std::min(heads_per_round, c.Hkv - kv0);
#pragma omp for schedule(static)
        for (int64_t ht = 0; ht < nh * c.ntiles; ++ht) {
          const int64_t slot = ht / c.ntiles, t = ht % c.ntiles;
          tile_kmax[ht] = prepare_kv_tile(c, kt + slot * kt_floats, v + slot * v_floats, b, kv0 + slot, t, row);
        }
        // implicit barrier: every thread sees the finished keys
        for (int64_t slot = 0; slot < nh; ++slot) {
          kmax[slot] = 0;
          for (int64_t t = 0; t < c.ntiles; ++t) kmax[slot] = std::max(kmax[slot], tile_kmax[slot * c.ntiles + t]);
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < nh * items_per_head; ++item) {
          const int64_t slot = item / items_per_head, rem = item % items_per_head;
          Ctx cl = c;
          cl.kt = kt + slot * kt_floats;
          cl.v = v + slot * v_floats;
          cl.kmax = kmax[slot];
          const int64_t h = (kv0 + slot) * c.group + rem / c.nqblocks;
          HWY_DYNAMIC_DISPATCH(ProcessBlock)(cl, b, h, rem % c.nqblocks, &sc, &local);
        }
        // implicit barrier before the next round overwrites the key scratch
      }
    }
#pragma omp critical
    {
      total.blocks += local.blocks;
      total.fixed += local.fixed;
      total.fallback += local.fallback;
      total.online += local.online;
    }
  }
  if (stats) {
    stats->blocks += total.blocks;
    stats->fixed_blocks += total.fixed;
    stats->fallback_blocks += total.fallback;
    stats->online_blocks += total.online;
  }
}

void attention(const AttentionArgs& a) { attention(a, AttentionCpuOptions{}, nullptr); }

void plan_attention(const AttentionArgs& a) {
  if (attention_impl_for(a, {}) == AttentionCpuImpl::OneDnn) attention_onednn_plan(a);
}

}  // namespace fluxrt::backend::cpu
#endif  // HWY_ONCE
