// The oneDNN primitives of the CPU attention (attention_onednn_primitives.h), made once per head
// dim, key chunking and compute type and kept for the process.
#include "backend/cpu/attention_onednn_primitives.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cpu/onednn_util.h"

namespace fluxrt::backend::cpu::detail {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

ChunkPrimitives make_chunk_primitives(int64_t D, int64_t w, dt cdt, std::string* impl) {
  auto& eng = onednn::engine();
  ChunkPrimitives p;
  const dnnl::primitive_attr attr = user_scratchpad();
  const dnnl::memory::desc q({kAttentionBlockM, D}, cdt, tag::ab);
  const dnnl::memory::desc s({kAttentionBlockM, w}, dt::f32, tag::ab);
  const dnnl::memory::desc pm({kAttentionBlockM, w}, cdt, tag::ab);
  const dnnl::memory::desc o({kAttentionBlockM, D}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc qk(dnnl::matmul::desc(q, dnnl::memory::desc({D, w}, cdt, tag::any), s),
                                        attr, eng);
  dnnl::primitive_attr sum_attr = user_scratchpad();
  dnnl::post_ops po;
  po.append_sum(1.0f);
  sum_attr.set_post_ops(po);
  const dnnl::matmul::primitive_desc pv(dnnl::matmul::desc(pm, dnnl::memory::desc({w, D}, cdt, tag::any), o),
                                        sum_attr, eng);
  const std::string shape =
      fmt::format("attention {}x{}x{} {}", kAttentionBlockM, D, w, cdt == dt::bf16 ? "bf16" : "f32");
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

}  // namespace

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

int64_t attention_primitive_sets() { return g_primitive_sets.load(std::memory_order_relaxed); }

}  // namespace fluxrt::backend::cpu::detail
