#pragma once
// The oneDNN primitives of the CPU attention (attention_onednn.cpp): per key chunk, S = Q·Kc^T and
// O += P·Vc on kAttentionBlockM query rows, and the reorders of plain key and value rows into the
// layouts those matmuls want. Made once per (head dim, chunking, compute type), planned for one
// thread each (the attention's own parallel loop runs them), with user scratchpads.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

namespace fluxrt::backend::cpu::detail {

constexpr int64_t kAttentionBlockM = 64;  // query rows per work item and per primitive call

// The primitives of one chunk width.
struct ChunkPrimitives {
  dnnl::matmul qk, pv;  // S = Q·Kc^T; O += P·Vc
  dnnl::memory::desc k_weights, v_weights;
  dnnl::reorder k_reorder, v_reorder;  // plain rows -> the weights layouts
  dnnl::memory::desc qk_scratch, pv_scratch, k_reorder_scratch, v_reorder_scratch;
};

struct Primitives {
  int64_t D = 0, chunk = 0, last = 0;
  dnnl::memory::data_type cdt = dnnl::memory::data_type::f32;
  ChunkPrimitives full, tail;  // tail: the last chunk when it is narrower
  size_t scratch_bytes = 0;    // the largest scratchpad of any of them
  std::string impl;            // Q·K^T implementation
  const ChunkPrimitives& of_width(int64_t w) const { return w == chunk ? full : tail; }
};

// The primitives for head dim D, key chunks of `chunk` keys and a last one of `last`, in compute
// type cdt: made on first use (thread-safe), then shared.
std::shared_ptr<const Primitives> primitives_for(int64_t D, int64_t chunk, int64_t last,
                                                 dnnl::memory::data_type cdt);

// Primitive sets made in this process.
int64_t attention_primitive_sets();

}  // namespace fluxrt::backend::cpu::detail
