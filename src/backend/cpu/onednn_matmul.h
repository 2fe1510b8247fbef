#pragma once
// oneDNN matmul for linear layers: weights reordered once into oneDNN's blocked layout, one
// primitive per call shape cached here, bias/activation/gated residual as post-ops.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/args/linear.h"

namespace fluxrt::backend::onednn {

class MatmulLinear {
 public:
  // weight [N, K] any float dtype, converted once to `compute` (f32 or bf16); bias [N] or undefined.
  MatmulLinear(const Tensor& weight, const Tensor& bias, DType compute);

  void run(const LinearArgs& args);

  DType compute_dtype() const { return compute_; }
  size_t weight_bytes() const { return weights_.get_desc().get_size(); }
  const std::string& impl_name() const { return impl_; }

 private:
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory weights;  // the prepared weights, or a per-shape reorder when oneDNN wanted another layout
    // oneDNN 2.6 has no JIT matmul for the gate-multiply + residual post-ops on some ISAs (AVX2)
    // and silently picks its reference kernel (~1000x slower). Then the primitive computes only
    // x W^T (+ bias, activation) into an f32 buffer and run() applies residual + gate * t itself.
    bool gate_outside = false;
  };
  // M, lda, ldy, ldr, activation, gated, residual-is-y, src dtype, dst dtype
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int, bool, bool, int, int>;
  Entry& entry(const Key& key);
  void run_gate_outside(Entry& e, std::unordered_map<int, dnnl::memory>& args, int64_t m, const Tensor& gate,
                        const Tensor& residual, const Tensor& y);

  int64_t n_, k_;
  DType compute_;
  dnnl::memory weights_;
  dnnl::memory bias_;  // f32 [1, N] or empty
  std::string impl_;
  std::mutex mutex_;
  std::map<Key, Entry> cache_;
};

}  // namespace fluxrt::backend::onednn
