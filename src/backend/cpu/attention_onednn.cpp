// CPU attention on oneDNN matmul primitives (see attention_onednn.h). The row passes between the
// two products (exp2 with the row maximum, rounding, row sums) are Highway code compiled once per
// target through foreach_target.h; the driver (primitives, OpenMP loops, key preparation) sits
// behind HWY_ONCE and exists once.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/attention_onednn.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/cpu/attention_exp2-inl.h"
#include "backend/cpu/simd-inl.h"

#ifndef FLUXRT_ATTENTION_ONEDNN_SHARED
#define FLUXRT_ATTENTION_ONEDNN_SHARED
namespace fluxrt::backend::cpu::detail {
// How a probability row is stored for P·V.
enum ProbabilityStore : int {
  kStoreF32 = 0,        // f32, exp2 accurate to f32
  kStoreF32AsBf16 = 1,  // f32 holding bf16-rounded values (the bf16 numerics on any CPU)
  kStoreBf16 = 2,       // bf16
};
}  // namespace fluxrt::backend::cpu::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {

// p_j = 2^(c s_j - m + maskadd_j) for j < n (a multiple of the vector length), stored as kStore
// says; returns the sum of the stored values, so the weights P·V applies sum to exactly l.
// One instantiation per store and mask so that the loop carries no branch.
template <int kStore, bool kMasked>
float ExpRowT(const float* HWY_RESTRICT s, int64_t n, float c, float m, const float* HWY_RESTRICT maskadd,
              void* HWY_RESTRICT p) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF vc = hn::Set(d, c), vneg_m = hn::Set(d, -m);
  VF sum = hn::Zero(d);
  for (int64_t j = 0; j < n; j += N) {
    VF x = hn::MulAdd(hn::LoadU(d, s + j), vc, vneg_m);
    if constexpr (kMasked) x = hn::Add(x, hn::LoadU(d, maskadd + j));
    if constexpr (kStore == detail::kStoreF32) {
      const VF e = AttentionExp2<7>(d, x);
      hn::StoreU(e, d, static_cast<float*>(p) + j);
      sum = hn::Add(sum, e);
    } else {
      // AttentionExp2 clamps its argument (a NaN becomes -127), so e is finite and >= 0 and
      // round-to-nearest-even to bf16 is one integer add of 0x7FFF plus the kept bit's parity.
      const auto bits = hn::BitCast(du, AttentionExp2<4>(d, x));
      const auto odd = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
      const auto rounded = hn::Add(bits, hn::Add(odd, hn::Set(du, 0x7FFFu)));
      const VF e = hn::BitCast(d, hn::And(rounded, hn::Set(du, 0xFFFF0000u)));
      if constexpr (kStore == detail::kStoreBf16) {
        const hn::Rebind<uint16_t, DF> du16;
        hn::StoreU(hn::TruncateTo(du16, hn::ShiftRight<16>(rounded)), du16,
                   reinterpret_cast<uint16_t*>(static_cast<hwy::bfloat16_t*>(p) + j));
      } else {
        hn::StoreU(e, d, static_cast<float*>(p) + j);
      }
      sum = hn::Add(sum, e);
    }
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

#if HWY_TARGET == HWY_AVX3
// ExpRowT<kStoreBf16> with the AVX512_BF16 instructions: VCVTNE2PS2BF16 rounds two vectors of
// probabilities to bf16 (round to nearest even, as the integer rounding above) in one
// instruction, and the row sum is VDPBF16PS of the stored bf16 row with ones, i.e. the sum of
// exactly the weights P·V applies, accumulated in f32 (in another order than lane by lane, an f32
// rounding apart) with the denormals P·V's own VDPBF16PS ignores ignored too. On 2 Zen5 cores
// klein-4B attention at L = 4608 went from 353-370 ms to 337-343 ms (three runs each,
// alternating); at L = 8704 it made no difference (1194-1229 ms against 1222-1237). n is a
// multiple of 32 (keys are padded to 64).
template <bool kMasked>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) float ExpRowBf16Native(
    const float* HWY_RESTRICT s, int64_t n, float c, float m, const float* HWY_RESTRICT maskadd,
    uint16_t* HWY_RESTRICT p) {
  const DF d;
  static_assert(MaxLanes(DF()) == 16, "the AVX3 target's f32 vectors are 16 lanes");
  const VF vc = hn::Set(d, c), vneg_m = hn::Set(d, -m);
  const __m512bh ones = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3F80));  // bf16 1.0
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 32) {
    VF x0 = hn::MulAdd(hn::LoadU(d, s + j), vc, vneg_m);
    VF x1 = hn::MulAdd(hn::LoadU(d, s + j + 16), vc, vneg_m);
    if constexpr (kMasked) {
      x0 = hn::Add(x0, hn::LoadU(d, maskadd + j));
      x1 = hn::Add(x1, hn::LoadU(d, maskadd + j + 16));
    }
    // The low 16 bf16 of the result come from the second operand.
    const __m512bh pair = _mm512_cvtne2ps_pbh(AttentionExp2<4>(d, x1).raw, AttentionExp2<4>(d, x0).raw);
    _mm512_storeu_si512(p + j, reinterpret_cast<__m512i>(pair));
    sum = _mm512_dpbf16_ps(sum, pair, ones);
  }
  return _mm512_reduce_add_ps(sum);
}

bool CpuHasAvx512Bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  return has;
}
#endif

float ExpRow(const float* HWY_RESTRICT s, int64_t n, float c, float m, const float* HWY_RESTRICT maskadd,
             void* HWY_RESTRICT p, int store) {
#if HWY_TARGET == HWY_AVX3
  if (store == detail::kStoreBf16 && n % 32 == 0 && CpuHasAvx512Bf16()) {
    uint16_t* out = static_cast<uint16_t*>(p);
    return maskadd ? ExpRowBf16Native<true>(s, n, c, m, maskadd, out)
                   : ExpRowBf16Native<false>(s, n, c, m, maskadd, out);
  }
#endif
  switch (store * 2 + (maskadd != nullptr)) {
    case detail::kStoreF32 * 2:
      return ExpRowT<detail::kStoreF32, false>(s, n, c, m, maskadd, p);
    case detail::kStoreF32 * 2 + 1:
      return ExpRowT<detail::kStoreF32, true>(s, n, c, m, maskadd, p);
    case detail::kStoreF32AsBf16 * 2:
      return ExpRowT<detail::kStoreF32AsBf16, false>(s, n, c, m, maskadd, p);
    case detail::kStoreF32AsBf16 * 2 + 1:
      return ExpRowT<detail::kStoreF32AsBf16, true>(s, n, c, m, maskadd, p);
    case detail::kStoreBf16 * 2:
      return ExpRowT<detail::kStoreBf16, false>(s, n, c, m, maskadd, p);
    default:
      return ExpRowT<detail::kStoreBf16, true>(s, n, c, m, maskadd, p);
  }
}

// max_j (c s_j + maskadd_j) over j < n (a multiple of the vector length).
float MaxScaledRow(const float* HWY_RESTRICT s, int64_t n, float c, const float* HWY_RESTRICT maskadd) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF vc = hn::Set(d, c);
  VF mx = hn::Set(d, -std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < n; j += N) {
    VF x = hn::Mul(hn::LoadU(d, s + j), vc);
    if (maskadd) x = hn::Add(x, hn::LoadU(d, maskadd + j));
    mx = hn::Max(mx, x);
  }
  return hn::GetLane(hn::MaxOfLanes(d, mx));
}

// One q, k or v row for the primitives: n elements of src as f32, rotated by RoPE when cos is
// given (`half_split`: pairs (j, j + n/2), else adjacent pairs), rounded to bf16 unless store is
// kStoreF32, written to dst as store says; *norm2 gets the squared norm of what was written,
// summed in f64. The rotation is rope_rotate_row's formula, so both attention implementations
// rotate alike (to an f32 rounding where the compiler fuses a product and a sum). Returns false,
// touching nothing, for a row off this target's vector grid; the caller then takes the scalar
// helpers.
template <typename T>
bool PrepareRowT(const T* HWY_RESTRICT src, int64_t n, const float* HWY_RESTRICT cos,
                 const float* HWY_RESTRICT sin, bool half_split, int store, void* HWY_RESTRICT dst,
                 double* norm2) {
#if HWY_TARGET == HWY_SCALAR
  (void)src, (void)n, (void)cos, (void)sin, (void)half_split, (void)store, (void)dst, (void)norm2;
  return false;  // no pairs inside one lane, no f64 halves: the scalar helpers are this target
#else
  const DF d;
  const hn::Half<DF> dh;
  const hn::Rebind<double, decltype(dh)> dd;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), half = n / 2;
  if (n % N != 0 || (cos != nullptr && half_split && half % N != 0)) return false;
  auto acc = hn::Zero(dd);
  auto finish = [&](int64_t j, VF y) {
    if (store != detail::kStoreF32) y = RoundTo<hwy::bfloat16_t>(d, y);
    if (store == detail::kStoreBf16)
      StoreF(d, y, static_cast<hwy::bfloat16_t*>(dst) + j);
    else
      hn::StoreU(y, d, static_cast<float*>(dst) + j);
    const auto lo = hn::PromoteTo(dd, hn::LowerHalf(dh, y));
    const auto hi = hn::PromoteTo(dd, hn::UpperHalf(dh, y));
    acc = hn::MulAdd(lo, lo, hn::MulAdd(hi, hi, acc));
  };
  if (cos == nullptr) {
    for (int64_t j = 0; j < n; j += N) finish(j, LoadF(d, src + j));
  } else if (half_split) {
    for (int64_t j = 0; j < half; j += N) {
      const VF xa = LoadF(d, src + j), xb = LoadF(d, src + j + half);
      const VF c = hn::LoadU(d, cos + j), sn = hn::LoadU(d, sin + j);
      finish(j, hn::Sub(hn::Mul(xa, c), hn::Mul(xb, sn)));
      finish(j + half, hn::Add(hn::Mul(xb, c), hn::Mul(xa, sn)));
    }
  } else {
    // Lanes (2i, 2i + 1) hold pair i: each table entry is widened to both lanes of its pair
    // (u32 -> u64, then the copy shifted into the upper half), and with the odd lanes' sine
    // negated y = x cos - swap(x) sin gives x_a cos - x_b sin and x_b cos + x_a sin.
    const hn::Repartition<uint64_t, DF> d64;
    const hn::Rebind<uint32_t, decltype(d64)> d32;
    const hn::RebindToUnsigned<DF> du;
    const auto odd_sign = hn::BitCast(d, hn::OddEven(hn::Set(du, 0x80000000u), hn::Zero(du)));
    auto pairs = [&](const float* t, int64_t i) {
      const auto w = hn::PromoteTo(d64, hn::LoadU(d32, reinterpret_cast<const uint32_t*>(t + i)));
      return hn::BitCast(d, hn::Or(w, hn::ShiftLeft<32>(w)));
    };
    for (int64_t j = 0; j < n; j += N) {
      const VF x = LoadF(d, src + j);
      const VF c = pairs(cos, j / 2), sn = hn::Xor(pairs(sin, j / 2), odd_sign);
      finish(j, hn::Sub(hn::Mul(x, c), hn::Mul(hn::Reverse2(d, x), sn)));
    }
  }
  *norm2 = hn::GetLane(hn::SumOfLanes(dd, acc));
  return true;
#endif
}

bool PrepareRow(const void* HWY_RESTRICT src, bool src_bf16, int64_t n, const float* HWY_RESTRICT cos,
                const float* HWY_RESTRICT sin, bool half_split, int store, void* HWY_RESTRICT dst,
                double* norm2) {
  if (src_bf16)
    return PrepareRowT(static_cast<const hwy::bfloat16_t*>(src), n, cos, sin, half_split, store, dst, norm2);
  return PrepareRowT(static_cast<const float*>(src), n, cos, sin, half_split, store, dst, norm2);
}

size_t Lanes() { return hn::Lanes(DF()); }

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <fmt/format.h>
#include <hwy/aligned_allocator.h>
#include <omp.h>

#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/attention_onednn.h"
#include "backend/cpu/attention_rows.h"
#include "backend/cpu/onednn_util.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/threads.h"

namespace fluxrt::backend::cpu {
HWY_EXPORT(ExpRow);
HWY_EXPORT(MaxScaledRow);
HWY_EXPORT(Lanes);
HWY_EXPORT(PrepareRow);

using namespace detail;

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

constexpr int64_t kBlockM = 64;    // query rows per work item and per primitive call
constexpr int64_t kKeyAlign = 64;  // keys are padded to a multiple of this (masked)
// Keys per Q·K^T / P·V call. The per-thread working set of a call (S in f32, P, the key and
// value chunks) is ~0.9 MB at D = 128 in bf16, inside a 1-2 MB L2, and each call is ~17 MFLOP,
// large enough that the per-call overhead of a primitive stays small.
constexpr int64_t kChunk = 1024;
// How many rows ahead a row loop asks for the rows it will read or write (prefetch_row).
constexpr int64_t kPrefetchRows = 8;

// The primitives of one (head dim, chunk width, compute type).
struct ChunkPrimitives {
  dnnl::matmul qk, pv;  // S = Q·Kc^T; O += P·Vc
  dnnl::memory::desc k_weights, v_weights;
  dnnl::reorder k_reorder, v_reorder;  // plain rows -> the weights layouts
  dnnl::memory::desc qk_scratch, pv_scratch, k_reorder_scratch, v_reorder_scratch;
};

struct Primitives {
  int64_t D = 0, chunk = 0, last = 0;
  dt cdt = dt::f32;
  ChunkPrimitives full, tail;  // tail: the last chunk when it is narrower
  size_t scratch_bytes = 0;
  std::string impl;  // Q·K^T implementation
  const ChunkPrimitives& of_width(int64_t w) const { return w == chunk ? full : tail; }
};

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

ChunkPrimitives make_chunk_primitives(int64_t D, int64_t w, dt cdt, std::string* impl) {
  auto& eng = onednn::engine();
  ChunkPrimitives p;
  const dnnl::primitive_attr attr = user_scratchpad();
  const dnnl::memory::desc q({kBlockM, D}, cdt, tag::ab);
  const dnnl::memory::desc s({kBlockM, w}, dt::f32, tag::ab);
  const dnnl::memory::desc pm({kBlockM, w}, cdt, tag::ab);
  const dnnl::memory::desc o({kBlockM, D}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc qk(dnnl::matmul::desc(q, dnnl::memory::desc({D, w}, cdt, tag::any), s),
                                        attr, eng);
  dnnl::primitive_attr sum_attr = user_scratchpad();
  dnnl::post_ops po;
  po.append_sum(1.0f);
  sum_attr.set_post_ops(po);
  const dnnl::matmul::primitive_desc pv(dnnl::matmul::desc(pm, dnnl::memory::desc({w, D}, cdt, tag::any), o),
                                        sum_attr, eng);
  const std::string shape =
      fmt::format("attention {}x{}x{} {}", kBlockM, D, w, cdt == dt::bf16 ? "bf16" : "f32");
  onednn::check_implementation("attention q.k", qk.impl_info_str(), shape);
  onednn::check_implementation("attention p.v", pv.impl_info_str(), shape);
  if (impl) *impl = qk.impl_info_str();
  p.qk = dnnl::matmul(qk);
  p.pv = dnnl::matmul(pv);
  p.k_weights = qk.weights_desc();
  p.v_weights = pv.weights_desc();
  p.qk_scratch = qk.scratchpad_desc();
  p.pv_scratch = pv.scratchpad_desc();
  // Key rows [w][D] row-major are the [D, w] weights with strides (1, D); value rows are [w, D].
  const dnnl::memory::desc k_plain({D, w}, cdt, dnnl::memory::dims{1, D});
  const dnnl::memory::desc v_plain({w, D}, cdt, dnnl::memory::dims{D, 1});
  const dnnl::reorder::primitive_desc kr(eng, k_plain, eng, p.k_weights, attr);
  const dnnl::reorder::primitive_desc vr(eng, v_plain, eng, p.v_weights, attr);
  p.k_reorder = dnnl::reorder(kr);
  p.v_reorder = dnnl::reorder(vr);
  p.k_reorder_scratch = kr.scratchpad_desc();
  p.v_reorder_scratch = vr.scratchpad_desc();
  return p;
}

std::atomic<int64_t> g_primitive_sets{0};

std::shared_ptr<const Primitives> primitives_for(int64_t D, int64_t chunk, int64_t last, dt cdt) {
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int>, std::shared_ptr<const Primitives>> cache;
  const auto key = std::make_tuple(D, chunk, last, static_cast<int>(cdt));
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto p = std::make_shared<Primitives>();
  p->D = D;
  p->chunk = chunk;
  p->last = last;
  p->cdt = cdt;
  {
    // Each primitive runs on one thread (inside the parallel loop over heads and blocks, where
    // oneDNN runs sequentially), so it is planned for one: blocking and scratch for one thread,
    // no split of K across threads.
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    struct Restore {
      int n;
      ~Restore() { omp_set_num_threads(n); }
    } restore{threads};
    p->full = make_chunk_primitives(D, chunk, cdt, &p->impl);
    if (last != chunk) p->tail = make_chunk_primitives(D, last, cdt, nullptr);
  }
  for (const ChunkPrimitives* c : {&p->full, &p->tail}) {
    if (!c->qk) continue;
    for (const auto& sd : {c->qk_scratch, c->pv_scratch, c->k_reorder_scratch, c->v_reorder_scratch})
      p->scratch_bytes = std::max(p->scratch_bytes, sd.get_size());
  }
  cache.emplace(key, p);
  g_primitive_sets.fetch_add(1, std::memory_order_relaxed);
  return p;
}

// What every work item of one call reads: the shapes, the prepared keys and values.
struct Call : AttentionShape {
  const AttentionArgs* a = nullptr;
  const AttentionCpuOptions* options = nullptr;
  std::shared_ptr<const Primitives> prims;
  int64_t Lkp = 0, nchunks = 0, nqblocks = 0;
  size_t elt = 4;      // bytes per element of q, k, v, p in the compute type
  bool round = false;  // values rounded to bf16 (bf16 compute or its emulation)
  int store = kStoreF32;
  float c = 0;  // scale * log2(e)
  bool own_q_table = false;
  int64_t q_pos_offset = 0;
  // Per kv-head slot of the round: key/value rows in the compute type ([Lkp][D] each), and the
  // chunks reordered for the primitives.
  std::vector<char*> k_rows, v_rows;
  std::vector<std::vector<dnnl::memory>> k_chunks, v_chunks;  // [slot][chunk]
  float* maskadd = nullptr;                                   // [Lkp] 0 or -inf
  const uint8_t* chunk_masked = nullptr;
  float* chunk_kmax = nullptr;  // [slot * nchunks + chunk]
  std::vector<float> kmax;      // [slot]
  bool batch_has_keys = true;
  int64_t width(int64_t ch) const { return ch == nchunks - 1 ? prims->last : prims->chunk; }
};

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// Writes n f32 values into a compute-type row (rounding first when c.round) and returns the
// squared norm of what was stored.
double put_row(const Call& c, float* x, int64_t n, char* dst) {
  double norm2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (c.round) x[i] = round_bf16(x[i]);
    norm2 += static_cast<double>(x[i]) * x[i];
  }
  if (c.prims->cdt == dt::bf16) {
    uint16_t* out = reinterpret_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
  } else {
    std::memcpy(dst, x, n * sizeof(float));
  }
  return norm2;
}

// Row `offset` of t (q, k or v), rotated when cos is given, into dst in the compute type (through
// `row`, D floats of scratch, where the vector path does not apply); returns the squared norm of
// what was stored.
double prepare_row(const Call& c, const Tensor& t, int64_t offset, const float* cos, const float* sin,
                   float* row, char* dst) {
  const AttentionArgs& a = *c.a;
  const bool half_split = a.rope == RopeLayout::HalfSplit;
  double norm2 = 0;
  if ((t.dtype() == DType::BF16 || t.dtype() == DType::F32) &&
      HWY_DYNAMIC_DISPATCH(PrepareRow)(static_cast<const char*>(t.raw_data()) + offset * t.element_size(),
                                       t.dtype() == DType::BF16, c.D, cos, sin, half_split, c.store, dst,
                                       &norm2))
    return norm2;
  load_row(t, offset, row, c.D);
  if (cos != nullptr) rope_rotate_row(row, c.D, a.rope, cos, sin);
  return put_row(c, row, c.D, dst);
}

// One worker's buffers and the oneDNN memory objects over them, rebuilt for new primitives.
struct ThreadState {
  std::shared_ptr<const Primitives> prims;
  GrowBuffer<char> q, p, scratch;  // q and p in the compute type
  GrowBuffer<float> s, o;
  std::vector<float> m, l, row;
  dnnl::memory qmem, omem;
  dnnl::memory smem[2], pmem[2];  // full chunk, tail chunk
  std::unordered_map<int, dnnl::memory> qk_args[2], pv_args[2];
  std::unordered_map<int, dnnl::memory> reorder_scratch_k[2], reorder_scratch_v[2];

  void bind(const std::shared_ptr<const Primitives>& pr, int64_t D, size_t elt) {
    if (prims == pr) return;
    prims = pr;
    auto& eng = onednn::engine();
    const dt cdt = pr->cdt;
    char* qb = q.get(kBlockM * D * elt);
    float* sb = s.get(kBlockM * pr->chunk);
    char* pb = p.get(kBlockM * pr->chunk * elt);
    float* ob = o.get(kBlockM * D);
    char* sp = scratch.get(pr->scratch_bytes);
    m.assign(kBlockM, 0.0f);
    l.assign(kBlockM, 0.0f);
    row.assign(D, 0.0f);
    qmem = dnnl::memory({{kBlockM, D}, cdt, tag::ab}, eng, qb);
    omem = dnnl::memory({{kBlockM, D}, dt::f32, tag::ab}, eng, ob);
    for (int i = 0; i < 2; ++i) {
      const int64_t w = i == 0 ? pr->chunk : pr->last;
      const ChunkPrimitives& cp = i == 0 ? pr->full : pr->of_width(pr->last);
      smem[i] = dnnl::memory({{kBlockM, w}, dt::f32, tag::ab}, eng, sb);
      pmem[i] = dnnl::memory({{kBlockM, w}, cdt, tag::ab}, eng, pb);
      qk_args[i] = {{DNNL_ARG_SRC, qmem}, {DNNL_ARG_DST, smem[i]}};
      pv_args[i] = {{DNNL_ARG_SRC, pmem[i]}, {DNNL_ARG_DST, omem}};
      reorder_scratch_k[i].clear();
      reorder_scratch_v[i].clear();
      // A scratchpad argument only where the primitive asks for one.
      auto add_scratch = [&](std::unordered_map<int, dnnl::memory>& args, const dnnl::memory::desc& sd) {
        if (sd.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(sd, eng, sp);
      };
      add_scratch(qk_args[i], cp.qk_scratch);
      add_scratch(pv_args[i], cp.pv_scratch);
      add_scratch(reorder_scratch_k[i], cp.k_reorder_scratch);
      add_scratch(reorder_scratch_v[i], cp.v_reorder_scratch);
    }
  }
};

ThreadState& thread_state() {
  thread_local ThreadState ts;
  return ts;
}

void execute(const dnnl::primitive& prim, std::unordered_map<int, dnnl::memory>& args) {
  prim.execute(onednn::stream(), args);
  onednn::stream().wait();
}

// Rotates, rounds and stores the keys and values of chunk `ch` of kv head `kvh` into slot
// `slot`, reorders them into the primitives' layouts and records max |k_j| over visible keys.
void prepare_chunk(Call& c, ThreadState& ts, int64_t slot, int64_t b, int64_t kvh, int64_t ch) {
  const AttentionArgs& a = *c.a;
  const int64_t D = c.D, w = c.width(ch), j0 = ch * c.prims->chunk;
  float* row = ts.row.data();
  char* krows = c.k_rows[slot] + j0 * D * c.elt;
  char* vrows = c.v_rows[slot] + j0 * D * c.elt;
  float kmax = 0;
  const int64_t visible_end = std::min(j0 + w, c.Lk);
  for (int64_t j = j0; j < std::min(j0 + kPrefetchRows, visible_end); ++j) {
    prefetch_row(a.k, off4(a.k, b, j, kvh), D);
    prefetch_row(a.v, off4(a.v, b, j, kvh), D);
  }
  for (int64_t jj = 0; jj < w; ++jj) {
    const int64_t j = j0 + jj;
    if (j + kPrefetchRows < visible_end) {
      prefetch_row(a.k, off4(a.k, b, j + kPrefetchRows, kvh), D);
      prefetch_row(a.v, off4(a.v, b, j + kPrefetchRows, kvh), D);
    }
    char* kdst = krows + jj * D * c.elt;
    char* vdst = vrows + jj * D * c.elt;
    if (j >= c.Lk) {
      std::memset(kdst, 0, D * c.elt);
      std::memset(vdst, 0, D * c.elt);
      continue;
    }
    const bool rope = a.rope != RopeLayout::None;
    const double norm2 =
        prepare_row(c, a.k, off4(a.k, b, j, kvh), rope ? rope_table_row(a.rope_cos, b, j) : nullptr,
                    rope ? rope_table_row(a.rope_sin, b, j) : nullptr, row, kdst);
    if (c.maskadd[j] == 0.0f) kmax = std::max(kmax, static_cast<float>(std::sqrt(norm2)));
    prepare_row(c, a.v, off4(a.v, b, j, kvh), nullptr, nullptr, row, vdst);
  }
  c.chunk_kmax[slot * c.nchunks + ch] = kmax;
  auto& eng = onednn::engine();
  const int i = w == c.prims->chunk ? 0 : 1;
  const ChunkPrimitives& cp = c.prims->of_width(w);
  std::unordered_map<int, dnnl::memory>& kargs = ts.reorder_scratch_k[i];
  kargs[DNNL_ARG_FROM] =
      dnnl::memory(dnnl::memory::desc({D, w}, c.prims->cdt, dnnl::memory::dims{1, D}), eng, krows);
  kargs[DNNL_ARG_TO] = c.k_chunks[slot][ch];
  execute(cp.k_reorder, kargs);
  std::unordered_map<int, dnnl::memory>& vargs = ts.reorder_scratch_v[i];
  vargs[DNNL_ARG_FROM] =
      dnnl::memory(dnnl::memory::desc({w, D}, c.prims->cdt, dnnl::memory::dims{D, 1}), eng, vrows);
  vargs[DNNL_ARG_TO] = c.v_chunks[slot][ch];
  execute(cp.v_reorder, vargs);
}

// Every key chunk for the block in ts.q with row maxima ts.m: O = P·V and l = row sums of P.
void block_pass(const Call& c, ThreadState& ts, int64_t slot) {
  const int64_t D = c.D;
  float* o = ts.o.data();
  std::fill(o, o + kBlockM * D, 0.0f);
  std::fill(ts.l.begin(), ts.l.end(), 0.0f);
  const float* s = ts.s.data();
  char* p = ts.p.data();
  for (int64_t ch = 0; ch < c.nchunks; ++ch) {
    const int64_t w = c.width(ch);
    const int i = w == c.prims->chunk ? 0 : 1;
    const ChunkPrimitives& cp = c.prims->of_width(w);
    ts.qk_args[i][DNNL_ARG_WEIGHTS] = c.k_chunks[slot][ch];
    execute(cp.qk, ts.qk_args[i]);
    const float* madd = c.chunk_masked[ch] ? c.maskadd + ch * c.prims->chunk : nullptr;
    for (int64_t r = 0; r < kBlockM; ++r)
      ts.l[r] += HWY_DYNAMIC_DISPATCH(ExpRow)(s + r * w, w, c.c, ts.m[r], madd, p + r * w * c.elt, c.store);
    ts.pv_args[i][DNNL_ARG_WEIGHTS] = c.v_chunks[slot][ch];
    execute(cp.pv, ts.pv_args[i]);
  }
}

// Each row's exact maximum of c·s over visible keys into ts.m (0 for a row with none, whose
// probabilities are then all 0).
void exact_maxima(const Call& c, ThreadState& ts, int64_t slot) {
  std::fill(ts.m.begin(), ts.m.end(), -std::numeric_limits<float>::infinity());
  const float* s = ts.s.data();
  for (int64_t ch = 0; ch < c.nchunks; ++ch) {
    const int64_t w = c.width(ch);
    const int i = w == c.prims->chunk ? 0 : 1;
    ts.qk_args[i][DNNL_ARG_WEIGHTS] = c.k_chunks[slot][ch];
    execute(c.prims->of_width(w).qk, ts.qk_args[i]);
    const float* madd = c.chunk_masked[ch] ? c.maskadd + ch * c.prims->chunk : nullptr;
    for (int64_t r = 0; r < kBlockM; ++r)
      ts.m[r] = std::max(ts.m[r], HWY_DYNAMIC_DISPATCH(MaxScaledRow)(s + r * w, w, c.c, madd));
  }
  for (float& m : ts.m)
    if (m == -std::numeric_limits<float>::infinity()) m = 0.0f;
}

struct Counts {
  int64_t blocks = 0, fixed = 0, fallback = 0, exact = 0;
};

// Query block `qb` of head h (kv slot `slot`): load + rotate q, fixed-maximum pass, row checks,
// exact pass when a row fails, O / l stored.
void process_block(const Call& c, ThreadState& ts, int64_t slot, int64_t b, int64_t h, int64_t qb,
                   Counts* n) {
  const AttentionArgs& a = *c.a;
  const int64_t D = c.D, i0 = qb * kBlockM, bm = std::min(kBlockM, c.Lq - i0);
  const Tensor& qcos = c.own_q_table ? a.rope_q_cos : a.rope_cos;
  const Tensor& qsin = c.own_q_table ? a.rope_q_sin : a.rope_sin;
  char* q = ts.q.data();
  float* row = ts.row.data();
  const float kmax = c.kmax[slot];
  for (int64_t r = 0; r < bm; ++r) prefetch_row(a.q, off4(a.q, b, i0 + r, h), D);
  for (int64_t r = 0; r < kBlockM; ++r) {
    char* qdst = q + r * D * c.elt;
    if (r >= bm) {  // zero rows: finite scores, probabilities that land in discarded output rows
      std::memset(qdst, 0, D * c.elt);
      ts.m[r] = 0.0f;
      continue;
    }
    const int64_t i = i0 + r;
    const bool rope = a.rope != RopeLayout::None;
    const int64_t pos = i + c.q_pos_offset;
    const double norm2 =
        prepare_row(c, a.q, off4(a.q, b, i, h), rope ? rope_table_row(qcos, b, pos) : nullptr,
                    rope ? rope_table_row(qsin, b, pos) : nullptr, row, qdst);
    // The bound in log2 units: |c| |q_i| max_j |k_j| >= c q_i·k_j for every visible j.
    ts.m[r] = static_cast<float>(std::fabs(static_cast<double>(c.c)) * std::sqrt(norm2) * kmax);
  }

  ++n->blocks;
  bool done = false;
  if (!c.options->force_online) {
    block_pass(c, ts, slot);
    done = true;
    for (int64_t r = 0; r < bm && done; ++r) {
      const float l = ts.l[r], m = ts.m[r];
      done = std::isfinite(m) && ((l >= kMinRowSum && l <= kMaxRowSum) || (!c.batch_has_keys && l == 0));
    }
    ++(done ? n->fixed : n->fallback);
  } else {
    ++n->exact;
  }
  if (!done) {
    exact_maxima(c, ts, slot);
    block_pass(c, ts, slot);
  }

  const float* o = ts.o.data();
  for (int64_t r = 0; r < std::min(bm, kPrefetchRows); ++r)
    prefetch_row(a.out, off4(a.out, b, i0 + r, h), D, true);
  for (int64_t r = 0; r < bm; ++r) {
    if (r + kPrefetchRows < bm) prefetch_row(a.out, off4(a.out, b, i0 + r + kPrefetchRows, h), D, true);
    const float inv = ts.l[r] > 0 ? 1.0f / ts.l[r] : 0.0f;
    for (int64_t k = 0; k < D; ++k) row[k] = o[r * D + k] * inv;
    store_row(a.out, off4(a.out, b, i0 + r, h), row, D);
  }
}

// Shared per-call buffers, owned by the calling thread and grown to the largest call.
struct CallWorkspace {
  GrowBuffer<char> k_rows, v_rows, k_chunks, v_chunks;  // in the compute type / oneDNN layouts
  GrowBuffer<float> maskadd, chunk_kmax;
  GrowBuffer<uint8_t> chunk_masked;
};
CallWorkspace& call_workspace() {
  thread_local CallWorkspace ws;
  return ws;
}

dt compute_type(const AttentionArgs& a) {
  return onednn::native_bf16() && a.q.dtype() == DType::BF16 ? dt::bf16 : dt::f32;
}

// Keys padded to a multiple of kKeyAlign, in chunks of kChunk (the last one narrower).
struct KeyChunks {
  int64_t padded = 0, chunk = 0, count = 0, last = 0;
};
KeyChunks key_chunks(int64_t Lk) {
  KeyChunks k;
  k.padded = std::max<int64_t>((Lk + kKeyAlign - 1) / kKeyAlign, 1) * kKeyAlign;
  k.chunk = std::min(kChunk, k.padded);
  k.count = (k.padded + k.chunk - 1) / k.chunk;
  k.last = k.padded - (k.count - 1) * k.chunk;
  return k;
}

std::shared_ptr<const Primitives> primitives_for_args(const AttentionArgs& a) {
  const KeyChunks k = key_chunks(a.k.size(1));
  return primitives_for(a.q.size(3), k.chunk, k.last, compute_type(a));
}

}  // namespace

int64_t attention_onednn_primitive_sets() { return g_primitive_sets.load(std::memory_order_relaxed); }

void attention_onednn_plan(const AttentionArgs& a) {
  if (!attention_onednn_supports(a) || a.q.numel() == 0 || a.k.size(1) == 0) return;
  HWY_DYNAMIC_DISPATCH(Lanes)();
  const auto prims = primitives_for_args(a);
  const size_t elt = prims->cdt == dt::bf16 ? sizeof(uint16_t) : sizeof(float);
  const int64_t D = a.q.size(3);
#pragma omp parallel num_threads(num_threads())
  {
    // An exception must not leave the region; the call itself meets (and reports, outside its
    // region) the same allocation failure.
    try {
      thread_state().bind(prims, D, elt);
    } catch (...) {
    }
  }
}

bool attention_onednn_supports(const AttentionArgs& a) { return !a.causal && !a.bias.defined(); }

bool attention_onednn_uses_bf16(const AttentionArgs& a) { return compute_type(a) == dt::bf16; }

std::string attention_onednn_describe(const AttentionArgs& a, const AttentionCpuOptions& options) {
  const auto prims = primitives_for_args(a);
  const bool bf16 = prims->cdt == dt::bf16;
  return fmt::format("onednn {} ({})",
                     bf16                   ? "bf16"
                     : options.emulate_bf16 ? "f32, bf16-rounded"
                                            : "f32",
                     prims->impl);
}

void attention_onednn(const AttentionArgs& a, const AttentionCpuOptions& options, AttentionCpuStats* stats) {
  FLUXRT_CHECK(attention_onednn_supports(a), ErrorCode::Unsupported,
               "[attention] the oneDNN path has no causal mask or bias");
  Call c;
  static_cast<AttentionShape&>(c) = AttentionShape(a);
  c.a = &a;
  c.options = &options;
  if (c.no_output()) return;
  if (c.Lk == 0) {  // nothing to attend to: zeros, as the SIMD path gives
    const std::vector<float> zeros(c.D, 0.0f);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < c.Lq; ++i)
        for (int64_t h = 0; h < c.H; ++h) store_row(a.out, off4(a.out, b, i, h), zeros.data(), c.D);
    return;
  }
  HWY_DYNAMIC_DISPATCH(Lanes)();  // chooses the target before worker threads call through the table
  c.prims = primitives_for_args(a);
  const Primitives& pr = *c.prims;
  const KeyChunks keys = key_chunks(c.Lk);
  c.nchunks = keys.count;
  c.Lkp = keys.padded;
  c.nqblocks = (c.Lq + kBlockM - 1) / kBlockM;
  const bool bf16 = pr.cdt == dt::bf16;
  c.elt = bf16 ? sizeof(uint16_t) : sizeof(float);
  c.round = bf16 || options.emulate_bf16;
  c.store = bf16 ? kStoreBf16 : c.round ? kStoreF32AsBf16 : kStoreF32;
  c.c = static_cast<float>(static_cast<double>(a.scale) * kLog2e);
  c.own_q_table = a.rope_q_cos.defined();
  c.q_pos_offset = c.own_q_table ? 0 : c.Lk - c.Lq;

  // kv heads per round: as many as 64 MiB of prepared keys and values hold (a klein layer's
  // 24 heads at L = 1536 in bf16), so threads meet at a barrier a few times per call.
  const size_t k_chunk_bytes = pr.full.k_weights.get_size(), v_chunk_bytes = pr.full.v_weights.get_size();
  const size_t k_tail_bytes = pr.last != pr.chunk ? pr.tail.k_weights.get_size() : k_chunk_bytes;
  const size_t v_tail_bytes = pr.last != pr.chunk ? pr.tail.v_weights.get_size() : v_chunk_bytes;
  const size_t k_head = (c.nchunks - 1) * k_chunk_bytes + k_tail_bytes;
  const size_t v_head = (c.nchunks - 1) * v_chunk_bytes + v_tail_bytes;
  const size_t rows_head = static_cast<size_t>(c.Lkp * c.D) * c.elt;
  const size_t per_head = 2 * rows_head + k_head + v_head;
  const int64_t heads_per_round =
      std::clamp<int64_t>(static_cast<int64_t>((size_t{64} << 20) / per_head), 1, c.Hkv);

  CallWorkspace& ws = call_workspace();
  char* k_rows = ws.k_rows.get(heads_per_round * rows_head);
  char* v_rows = ws.v_rows.get(heads_per_round * rows_head);
  char* k_blocked = ws.k_chunks.get(heads_per_round * k_head);
  char* v_blocked = ws.v_chunks.get(heads_per_round * v_head);
  c.maskadd = ws.maskadd.get(c.Lkp);
  uint8_t* chunk_masked = ws.chunk_masked.get(c.nchunks);
  c.chunk_masked = chunk_masked;
  c.chunk_kmax = ws.chunk_kmax.get(heads_per_round * c.nchunks);
  auto& eng = onednn::engine();
  c.k_rows.resize(heads_per_round);
  c.v_rows.resize(heads_per_round);
  c.k_chunks.assign(heads_per_round, {});
  c.v_chunks.assign(heads_per_round, {});
  c.kmax.assign(heads_per_round, 0.0f);
  for (int64_t slot = 0; slot < heads_per_round; ++slot) {
    c.k_rows[slot] = k_rows + slot * rows_head;
    c.v_rows[slot] = v_rows + slot * rows_head;
    size_t koff = slot * k_head, voff = slot * v_head;
    for (int64_t ch = 0; ch < c.nchunks; ++ch) {
      const ChunkPrimitives& cp = pr.of_width(c.width(ch));
      c.k_chunks[slot].emplace_back(cp.k_weights, eng, k_blocked + koff);
      c.v_chunks[slot].emplace_back(cp.v_weights, eng, v_blocked + voff);
      koff += cp.k_weights.get_size();
      voff += cp.v_weights.get_size();
    }
  }

  // An exception must not leave an OpenMP region, and a thread that skipped a worksharing loop
  // would leave the others waiting at its barrier: the first error is kept, every later item is
  // skipped, every thread still meets every barrier, and the error is rethrown after the region.
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  auto guarded = [&](auto&& body) {
    if (failed.load(std::memory_order_relaxed)) return;
    try {
      body();
    } catch (...) {
#pragma omp critical(fluxrt_attention_onednn_error)
      if (!error) error = std::current_exception();
      failed.store(true, std::memory_order_relaxed);
    }
  };
  Counts total;
  const int nthreads = num_threads();
#pragma omp parallel num_threads(nthreads)
  {
    ThreadState& ts = thread_state();
    guarded([&] { ts.bind(c.prims, c.D, c.elt); });
    Counts local;
    for (int64_t b = 0; b < c.B; ++b) {
#pragma omp single
      {
        bool any = false;
        for (int64_t j = 0; j < c.Lkp; ++j) {
          const bool keep = key_visible(a, b, j);
          c.maskadd[j] = keep ? 0.0f : -std::numeric_limits<float>::infinity();
          any = any || keep;
        }
        for (int64_t ch = 0; ch < c.nchunks; ++ch) {
          chunk_masked[ch] = 0;
          for (int64_t jj = 0; jj < c.width(ch); ++jj)
            chunk_masked[ch] |= c.maskadd[ch * pr.chunk + jj] != 0.0f;
        }
        c.batch_has_keys = any;
      }  // implicit barrier
      for (int64_t kv0 = 0; kv0 < c.Hkv; kv0 += heads_per_round) {
        const int64_t nh = std::min(heads_per_round, c.Hkv - kv0);
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < nh * c.nchunks; ++item)
          guarded(
              [&] { prepare_chunk(c, ts, item / c.nchunks, b, kv0 + item / c.nchunks, item % c.nchunks); });
#pragma omp single
        for (int64_t slot = 0; slot < nh; ++slot) {
          c.kmax[slot] = 0;
          for (int64_t ch = 0; ch < c.nchunks; ++ch)
            c.kmax[slot] = std::max(c.kmax[slot], c.chunk_kmax[slot * c.nchunks + ch]);
        }  // implicit barrier: every thread sees the prepared keys and their maxima
        const int64_t items_per_head = c.group * c.nqblocks;
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < nh * items_per_head; ++item) {
          const int64_t slot = item / items_per_head, rem = item % items_per_head;
          const int64_t h = (kv0 + slot) * c.group + rem / c.nqblocks;
          guarded([&] { process_block(c, ts, slot, b, h, rem % c.nqblocks, &local); });
        }
        // implicit barrier before the next round overwrites the prepared keys
      }
    }
#pragma omp critical(fluxrt_attention_onednn_counts)
    {
      total.blocks += local.blocks;
      total.fixed += local.fixed;
      total.fallback += local.fallback;
      total.exact += local.exact;
    }
  }
  if (error) std::rethrow_exception(error);
  if (stats) {
    stats->blocks += total.blocks;
    stats->fixed_blocks += total.fixed;
    stats->fallback_blocks += total.fallback;
    stats->online_blocks += total.exact;
  }
}

}  // namespace fluxrt::backend::cpu
#endif  // HWY_ONCE
