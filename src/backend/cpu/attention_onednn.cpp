// CPU attention on oneDNN matmul primitives (see attention_onednn.h): the primitives, the OpenMP
// loops and the key preparation. The row passes between the two products (exp2 with the row
// maximum, rounding, row sums) and the vector row loads are attention_onednn_rows.h's.
#include "backend/cpu/attention_onednn.h"

#include <fmt/format.h>
#include <hwy/aligned_allocator.h>

#include <atomic>
#include <exception>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/attention_onednn_primitives.h"
#include "backend/cpu/attention_onednn_rows.h"
#include "backend/cpu/attention_rows.h"
#include "backend/cpu/onednn_util.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/threads.h"

namespace fluxrt::backend::cpu {

using namespace detail;

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

constexpr int64_t kKeyAlign = 64;  // keys are padded to a multiple of this (masked)
// Keys per Q·K^T / P·V call. The per-thread working set of a call (S in f32, P, the key and
// value chunks) is ~0.9 MB at D = 128 in bf16, inside a 1-2 MB L2, and each call is ~17 MFLOP,
// large enough that the per-call overhead of a primitive stays small.
constexpr int64_t kChunk = 1024;
// How many rows ahead a row loop asks for the rows it will read or write (prefetch_row).
constexpr int64_t kPrefetchRows = 8;

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
      prepare_row_vectorized(static_cast<const char*>(t.raw_data()) + offset * t.element_size(),
                             t.dtype() == DType::BF16, c.D, cos, sin, half_split, c.store, dst, &norm2))
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
    char* qb = q.get(kAttentionBlockM * D * elt);
    float* sb = s.get(kAttentionBlockM * pr->chunk);
    char* pb = p.get(kAttentionBlockM * pr->chunk * elt);
    float* ob = o.get(kAttentionBlockM * D);
    char* sp = scratch.get(pr->scratch_bytes);
    m.assign(kAttentionBlockM, 0.0f);
    l.assign(kAttentionBlockM, 0.0f);
    row.assign(D, 0.0f);
    qmem = dnnl::memory({{kAttentionBlockM, D}, cdt, tag::ab}, eng, qb);
    omem = dnnl::memory({{kAttentionBlockM, D}, dt::f32, tag::ab}, eng, ob);
    for (int i = 0; i < 2; ++i) {
      const int64_t w = i == 0 ? pr->chunk : pr->last;
      const ChunkPrimitives& cp = i == 0 ? pr->full : pr->of_width(pr->last);
      smem[i] = dnnl::memory({{kAttentionBlockM, w}, dt::f32, tag::ab}, eng, sb);
      pmem[i] = dnnl::memory({{kAttentionBlockM, w}, cdt, tag::ab}, eng, pb);
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
  std::fill(o, o + kAttentionBlockM * D, 0.0f);
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
    for (int64_t r = 0; r < kAttentionBlockM; ++r)
      ts.l[r] += exp_row(s + r * w, w, c.c, ts.m[r], madd, p + r * w * c.elt, c.store);
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
    for (int64_t r = 0; r < kAttentionBlockM; ++r)
      ts.m[r] = std::max(ts.m[r], max_scaled_row(s + r * w, w, c.c, madd));
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
  const int64_t D = c.D, i0 = qb * kAttentionBlockM, bm = std::min(kAttentionBlockM, c.Lq - i0);
  const Tensor& qcos = c.own_q_table ? a.rope_q_cos : a.rope_cos;
  const Tensor& qsin = c.own_q_table ? a.rope_q_sin : a.rope_sin;
  char* q = ts.q.data();
  float* row = ts.row.data();
  const float kmax = c.kmax[slot];
  for (int64_t r = 0; r < bm; ++r) prefetch_row(a.q, off4(a.q, b, i0 + r, h), D);
  for (int64_t r = 0; r < kAttentionBlockM; ++r) {
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

int64_t attention_onednn_primitive_sets() { return attention_primitive_sets(); }

void attention_onednn_plan(const AttentionArgs& a) {
  if (!attention_onednn_supports(a) || a.q.numel() == 0 || a.k.size(1) == 0) return;
  row_lanes();
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
  row_lanes();  // chooses the target before worker threads call through the table
  c.prims = primitives_for_args(a);
  const Primitives& pr = *c.prims;
  const KeyChunks keys = key_chunks(c.Lk);
  c.nchunks = keys.count;
  c.Lkp = keys.padded;
  c.nqblocks = (c.Lq + kAttentionBlockM - 1) / kAttentionBlockM;
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
