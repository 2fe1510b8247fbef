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
  // y_row_stride: the row stride of the y it will write (0: N, a y of its own). oneDNN's layout
  // choice depends on it: a column group of a wider y (linear_cpu.cpp) written into place gets
  // plain weights on AMX, where a dense y gets blocked ones, so the weights are prepared for the
  // stride they will be used with instead of being reordered a second time at the first call.
  // x_row_stride: the same for the rows of x it will read (0: K), e.g. a slice of K of a deeper x.
  MatmulLinear(const Tensor& weight, const Tensor& bias, DType compute, int64_t y_row_stride = 0,
               int64_t x_row_stride = 0);

  // How a call's result joins a partial sum: a deep layer runs as slices of K (linear_cpu.cpp),
  // each a MatmulLinear of its own. None: y = epilogue(x W^T + b) as usual (also the first slice,
  // into an f32 [M, N] sum of its own). Accumulate: y += x W^T (y the f32 sum; no bias, activation
  // or gate). Finish: y = epilogue(sum + x W^T + b), `sum` [M, N] f32 contiguous added first, with
  // args' activation and gated residual after it, one rounding to y's dtype.
  enum class Partial { None, Accumulate, Finish };

  void run(const LinearArgs& args, Partial partial = Partial::None, const Tensor& sum = Tensor());

  // Weights given per call instead of prepared once: a quantized weight dequantized a chunk of
  // rows at a time (linear_quant_cpu.h). W [n, k] row-major in `compute` and the f32 bias [n]
  // (when `with_bias`) are passed to run_with. Unsupported when oneDNN has only its reference
  // kernel for weights in that plain layout (it would want them reordered, which per call defeats
  // the purpose).
  static std::unique_ptr<MatmulLinear> with_weights_per_call(int64_t n, int64_t k, bool with_bias,
                                                             DType compute);
  void run_with(const LinearArgs& args, const void* weights, const float* bias);

  // The oneDNN implementation (primitive_desc impl_info_str, e.g. "brg:avx2") that run() uses
  // for a call with these arguments; with " + gate outside" appended when the gated residual is
  // applied after an activation-only primitive because oneDNN would have picked its reference
  // kernel. Builds and caches the primitive exactly as run() would (the data is not read).
  std::string impl_for(const LinearArgs& args, Partial partial = Partial::None);
  // impl_for, and the calling thread's scratchpad grown to what that primitive needs: all of a
  // call's one-time work, ahead of the call.
  void plan(const LinearArgs& args, Partial partial = Partial::None);

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
    std::string impl;  // impl_info_str of `prim`
    dnnl::memory::desc scratchpad;  // what `prim` needs (user mode: the calling thread's shared buffer)
  };
  // M, lda, ldy, ldr, activation, gated, residual-is-y, src dtype, dst dtype, Partial
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int, bool, bool, int, int, int>;
  Entry& entry(const Key& key);
  // the cache entry run() would use for args
  const Entry& entry_for(const LinearArgs& args, Partial partial);
  // The cache key of a call: x in the compute dtype (converted when it is not), y direct or
  // through an f32 temporary, the residual aliasing y or not. Mirrors run()'s conversions.
  Key key_for(const LinearArgs& args, int64_t x_stride, bool direct, bool residual_is_y,
              int64_t residual_stride, Partial partial) const;
  void run_gate_outside(Entry& e, std::unordered_map<int, dnnl::memory>& args, int64_t m, const Tensor& gate,
                        const Tensor& residual, const Tensor& y);
  MatmulLinear(int64_t n, int64_t k, bool with_bias, DType compute);  // with_weights_per_call
  void run_impl(const LinearArgs& args, const dnnl::memory* weights, const dnnl::memory* bias,
                Partial partial, const Tensor& sum);

  int64_t n_, k_;
  DType compute_;
  dnnl::memory weights_;
  dnnl::memory bias_;  // f32 [1, N] or empty
  std::string impl_;
  bool per_call_weights_ = false;  // weights_ / bias_ are descriptors only; run_with gives the data
  std::mutex mutex_;
  std::map<Key, Entry> cache_;
};

// Scratchpad buffers the matmuls have allocated in this process: every matmul executes with its
// calling thread's one buffer, which grows only for a larger scratchpad than any before.
int64_t matmul_scratchpad_allocations();
// Primitives (cache entries: one per weight and call shape) the matmuls have made in this process.
int64_t matmul_entries_created();

}  // namespace fluxrt::backend::onednn
