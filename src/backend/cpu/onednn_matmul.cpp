#include "backend/cpu/onednn_matmul.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/cpu/onednn_util.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/log.h"

namespace fluxrt::backend::onednn {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// The M used to ask oneDNN for its preferred weight layout at prepare time; the layout depends
// on K, N and the ISA, not on M, for the brgemm/gemm implementations of 2.x.
constexpr int64_t kPrepareRows = 1024;

std::atomic<int64_t> g_entries_created{0};

dnnl::memory::desc plain_2d(int64_t rows, int64_t cols, dt type, int64_t ld) {
  return dnnl::memory::desc({rows, cols}, type, dnnl::memory::dims{ld, 1});
}

}  // namespace

MatmulLinear::MatmulLinear(const Tensor& weight, const Tensor& bias, DType compute, int64_t y_row_stride,
                           int64_t x_row_stride)
    : n_(weight.size(0)), k_(weight.size(1)), compute_(compute) {
  auto& eng = engine();
  sync_threads();
  const dt cdt = to_dnnl(compute);
  // W [N, K] seen as the K x N weights matrix of oneDNN: strides (1, K) for a row-major W.
  const Tensor w = weight.dtype() == compute ? weight : weight.to(compute);
  dnnl::memory::desc w_plain({k_, n_}, cdt, dnnl::memory::dims{w.stride(1), w.stride(0)});
  dnnl::memory::desc w_any({k_, n_}, cdt, tag::any);
  const dnnl::memory::desc src = plain_2d(kPrepareRows, k_, cdt, x_row_stride > 0 ? x_row_stride : k_);
  const dnnl::memory::desc dst = plain_2d(kPrepareRows, n_, dt::f32, y_row_stride > 0 ? y_row_stride : n_);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, w_any, dst), eng);
  impl_ = pd.impl_info_str();
  weights_ = dnnl::memory(pd.weights_desc(), eng);
  advise_huge_pages(weights_.get_data_handle(),
                    pd.weights_desc().get_size());  // before the reorder writes it
  dnnl::memory src_mem(w_plain, eng, const_cast<void*>(w.raw_data()));
  dnnl::reorder(src_mem, weights_).execute(stream(), src_mem, weights_);
  stream().wait();

  if (bias.defined()) {
    bias_ = dnnl::memory(dnnl::memory::desc({1, n_}, dt::f32, tag::ab), eng);
    const Tensor b = bias.contiguous();
    convert(b.raw_data(), b.dtype(), bias_.get_data_handle(), DType::F32, static_cast<size_t>(n_));
  }
}

void MatmulLinear::run_gate_outside(Entry& e, std::unordered_map<int, dnnl::memory>& args, int64_t m,
                                    const Tensor& gate, const Tensor& residual, const Tensor& y) {
  auto& eng = engine();
  const Tensor t = Tensor::empty({m, n_}, DType::F32);  // act(x W^T + b), not zero-filled
  args[DNNL_ARG_DST] = dnnl::memory(plain_2d(m, n_, dt::f32, n_), eng, const_cast<void*>(t.raw_data()));
  e.prim.execute(stream(), args);
  stream().wait();
  const std::vector<float> g = gate.contiguous().to_vector();
  const size_t rb = dtype_size(residual.dtype()), yb = dtype_size(y.dtype());
  const float* tp = t.data<float>();
  // One pass over t, residual and y, rows split over the pool (oneDNN's threads are idle here).
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(n_));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      // Same rounding as the post-op chain: residual + gate * t in f32, one rounding to y's dtype.
      const auto* r = static_cast<const char*>(residual.raw_data()) + static_cast<size_t>(i * residual.stride(0)) * rb;
      convert(r, residual.dtype(), row.data(), DType::F32, static_cast<size_t>(n_));
      const float* ti = tp + i * n_;
      for (int64_t j = 0; j < n_; ++j) row[j] += g[j] * ti[j];
      auto* dst = static_cast<char*>(y.raw_data()) + static_cast<size_t>(i * y.stride(0)) * yb;
      convert(row.data(), DType::F32, dst, y.dtype(), static_cast<size_t>(n_));
    }
  }
}

MatmulLinear::MatmulLinear(int64_t n, int64_t k, bool with_bias, DType compute)
    : n_(n), k_(k), compute_(compute), per_call_weights_(true) {
  auto& eng = engine();
  sync_threads();
  const dt cdt = to_dnnl(compute);
  // W [n, k] row-major seen as oneDNN's K x N weights: strides (1, k). No data until run_with.
  weights_ =
      dnnl::memory(dnnl::memory::desc({k_, n_}, cdt, dnnl::memory::dims{1, k_}), eng, DNNL_MEMORY_NONE);
  if (with_bias) bias_ = dnnl::memory(dnnl::memory::desc({1, n_}, dt::f32, tag::ab), eng, DNNL_MEMORY_NONE);
  const dnnl::memory::desc src({kPrepareRows, k_}, cdt, tag::ab);
  const dnnl::memory::desc dst({kPrepareRows, n_}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights_.get_desc(), dst), eng);
  impl_ = pd.impl_info_str();
  FLUXRT_CHECK(impl_.rfind("ref", 0) != 0, ErrorCode::Unsupported,
               "[linear] oneDNN has no JIT matmul for {} weights in a plain layout (K={}, N={})",
               dtype_name(compute), k_, n_);
}

std::unique_ptr<MatmulLinear> MatmulLinear::with_weights_per_call(int64_t n, int64_t k, bool with_bias,
                                                                  DType compute) {
  return std::unique_ptr<MatmulLinear>(new MatmulLinear(n, k, with_bias, compute));
}

MatmulLinear::Entry& MatmulLinear::entry(const Key& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;

  const auto [m, lda, ldy, ldr, act, gated, residual_is_y, sdt, ddt, partial_int] = key;
  const auto partial = static_cast<Partial>(partial_int);
  auto& eng = engine();
  dnnl::memory::desc src = plain_2d(m, k_, static_cast<dt>(sdt), lda);
  dnnl::memory::desc dst = plain_2d(m, n_, static_cast<dt>(ddt), ldy);
  auto attr_for = [&](bool with_gate) {
    dnnl::post_ops po;
    // The partial sum of the K slices before this one: added to the accumulators (with the bias)
    // before the activation, so the layer's epilogue sees the whole sum.
    if (partial == Partial::Finish)
      po.append_binary(dnnl::algorithm::binary_add, plain_2d(m, n_, dt::f32, n_));
    if (partial == Partial::Accumulate) po.append_sum(1.0f);
    if (act == static_cast<int>(Activation::GeluTanh)) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
    if (act == static_cast<int>(Activation::Silu)) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
    if (with_gate) {
      po.append_binary(dnnl::algorithm::binary_mul, dnnl::memory::desc({1, n_}, dt::f32, tag::ab));
      if (residual_is_y)
        po.append_sum(1.0f);
      else
        po.append_binary(dnnl::algorithm::binary_add, plain_2d(m, n_, static_cast<dt>(ddt), ldr));
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
  };
  const dnnl::memory::desc bias_md = bias_ ? bias_.get_desc() : dnnl::memory::desc();

  // Only primitive descriptors are created until the implementation is settled: creating a
  // primitive (JIT code generation) or reordering weights for an implementation that is then
  // discarded would be wasted work.
  struct Plan {
    dnnl::matmul::primitive_desc pd;
    bool own_weights = false;  // pd wants the weights in another layout than the prepared one
    bool reference() const { return std::string(pd.impl_info_str()).rfind("ref", 0) == 0; }
  };
  auto plan = [&](const dnnl::memory::desc& dst_md, const dnnl::primitive_attr& at) {
    Plan p;
    bool fixed_ok = true;
    try {
      p.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights_.get_desc(), bias_md, dst_md), at, eng);
    } catch (const dnnl::error&) {
      fixed_ok = false;
    }
    // The reference kernel accepts any weight layout, so a "ref" answer for the prepared layout
    // may only mean that the JIT kernels want another one for this M: ask with layout `any`
    // (not for weights given per call, which have no data to reorder here).
    if (!per_call_weights_ && (!fixed_ok || p.reference())) {
      const dnnl::memory::desc w_any({k_, n_}, weights_.get_desc().data_type(), tag::any);
      try {
        Plan q;
        q.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, w_any, bias_md, dst_md), at, eng);
        q.own_weights = q.pd.weights_desc() != weights_.get_desc();
        if (!fixed_ok || !q.reference()) p = std::move(q);
      } catch (const dnnl::error&) {
        if (!fixed_ok) throw;
      }
    }
    return p;
  };
  Plan p = plan(dst, attr_for(gated));
  bool gate_outside = false;
  if (gated && p.reference()) {
    // oneDNN 2.6 has no JIT kernel for this post-op chain here (AVX2): compute
    // t = act(x W^T + b) in f32 with the JIT kernel and apply the gated residual in run().
    p = plan(plain_2d(m, n_, dt::f32, n_), attr_for(false));
    gate_outside = true;
  }
  check_implementation(
      "linear", p.pd.impl_info_str(),
      fmt::format("{} M={} K={} N={}{}{}", dtype_name(compute_), m, k_, n_, gated ? " gated" : "",
                  partial == Partial::Accumulate ? " accumulate"
                  : partial == Partial::Finish   ? " finish"
                                                 : ""));
  Entry e;
  g_entries_created.fetch_add(1, std::memory_order_relaxed);
  e.prim = dnnl::matmul(p.pd);
  e.scratchpad = p.pd.scratchpad_desc();
  e.impl = p.pd.impl_info_str();
  e.gate_outside = gate_outside;
  if (p.own_weights) {
    if (first_report(fmt::format("linear second layout|{}|{}|{}", m, k_, n_)))
      FLUXRT_LOG_WARN(
          "[linear] oneDNN needs a second weight layout for M={} (K={}, N={}): a second copy of "
          "those weights is kept",
          m, k_, n_);
    e.weights = dnnl::memory(p.pd.weights_desc(), eng);
    advise_huge_pages(e.weights.get_data_handle(), p.pd.weights_desc().get_size());
    dnnl::reorder(weights_, e.weights).execute(stream(), weights_, e.weights);
    stream().wait();
  } else {
    e.weights = weights_;
  }
  return cache_.emplace(key, std::move(e)).first->second;
}

MatmulLinear::Key MatmulLinear::key_for(const LinearArgs& a, int64_t x_stride, bool direct,
                                        bool residual_is_y, int64_t residual_stride, Partial partial) const {
  const bool gated = a.gate.defined();
  const DType ydt = direct ? a.y.dtype() : DType::F32;
  return Key{a.x.size(0),
             x_stride,
             direct ? a.y.stride(0) : n_,
             gated && !residual_is_y ? residual_stride : 0,
             static_cast<int>(a.activation),
             gated,
             residual_is_y,
             static_cast<int>(to_dnnl(compute_)),
             static_cast<int>(to_dnnl(ydt)),
             static_cast<int>(partial)};
}

const MatmulLinear::Entry& MatmulLinear::entry_for(const LinearArgs& a, Partial partial) {
  sync_threads();
  const bool direct = a.y.dtype() == DType::F32 || a.y.dtype() == compute_;
  const bool gated = a.gate.defined();
  const bool residual_is_y = gated && direct && a.residual.raw_data() == a.y.raw_data() &&
                             a.residual.stride(0) == a.y.stride(0) && a.residual.dtype() == a.y.dtype();
  // run() converts x (and a residual of another dtype) into contiguous copies.
  const int64_t x_stride = a.x.dtype() == compute_ ? a.x.stride(0) : k_;
  const DType ydt = direct ? a.y.dtype() : DType::F32;
  const int64_t r_stride = gated && a.residual.dtype() != ydt ? n_ : (gated ? a.residual.stride(0) : 0);
  return entry(key_for(a, x_stride, direct, residual_is_y, r_stride, partial));
}

std::string MatmulLinear::impl_for(const LinearArgs& a, Partial partial) {
  const Entry& e = entry_for(a, partial);
  return e.gate_outside ? e.impl + " + gate outside" : e.impl;
}

void MatmulLinear::plan(const LinearArgs& a, Partial partial) {
  const Entry& e = entry_for(a, partial);
  if (e.scratchpad.get_size() > 0) thread_scratchpad(e.scratchpad.get_size());
}

void MatmulLinear::run(const LinearArgs& a, Partial partial, const Tensor& sum) {
  FLUXRT_CHECK(!per_call_weights_, ErrorCode::Internal, "[linear] run without the per-call weights");
  FLUXRT_CHECK(partial != Partial::Accumulate || (a.y.dtype() == DType::F32 && !a.gate.defined() &&
                                                  a.activation == Activation::None && !bias_),
               ErrorCode::Internal, "[linear] a partial sum accumulates in f32 without bias or epilogue");
  FLUXRT_CHECK(
      partial != Partial::Finish || (sum.defined() && sum.dtype() == DType::F32 && sum.is_contiguous() &&
                                     sum.size(0) == a.x.size(0) && sum.size(1) == n_),
      ErrorCode::Internal, "[linear] the partial sum must be a contiguous f32 [M, N]");
  run_impl(a, nullptr, nullptr, partial, sum);
}

void MatmulLinear::run_with(const LinearArgs& a, const void* weights, const float* bias) {
  FLUXRT_CHECK(per_call_weights_, ErrorCode::Internal, "[linear] run_with on a matmul with prepared weights");
  const dnnl::memory w(weights_.get_desc(), engine(), const_cast<void*>(weights));
  const dnnl::memory b =
      bias_ ? dnnl::memory(bias_.get_desc(), engine(), const_cast<float*>(bias)) : dnnl::memory();
  run_impl(a, &w, bias_ ? &b : nullptr, Partial::None, Tensor());
}

void MatmulLinear::run_impl(const LinearArgs& a, const dnnl::memory* weights, const dnnl::memory* bias,
                            Partial partial, const Tensor& sum) {
  sync_threads();
  auto& eng = engine();
  // oneDNN wants src in the compute dtype; other inputs are converted (a copy of x, O(M*K)).
  Tensor x = a.x;
  if (x.dtype() != compute_) x = x.to(compute_);
  const int64_t m = x.size(0);
  // Destinations oneDNN cannot write for this compute type go through an f32 temporary.
  const bool direct = a.y.dtype() == DType::F32 || a.y.dtype() == compute_;
  Tensor y = direct ? a.y : Tensor::empty({m, n_}, DType::F32);
  const bool gated = a.gate.defined();
  bool residual_is_y = false;
  Tensor residual = a.residual;
  if (gated) {
    residual_is_y = direct && residual.raw_data() == y.raw_data() && residual.stride(0) == y.stride(0) &&
                    residual.dtype() == y.dtype();
    if (!residual_is_y && residual.dtype() != y.dtype()) residual = residual.to(y.dtype());
  }
  Entry& e = entry(key_for(a, x.stride(0), direct, residual_is_y, gated ? residual.stride(0) : 0, partial));

  dnnl::memory src_mem(plain_2d(m, k_, to_dnnl(x.dtype()), x.stride(0)), eng, const_cast<void*>(x.raw_data()));
  dnnl::memory dst_mem(plain_2d(m, n_, to_dnnl(y.dtype()), y.stride(0)), eng, y.raw_data());
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, weights ? *weights : e.weights}, {DNNL_ARG_DST, dst_mem}};
  if (bias_) args.emplace(DNNL_ARG_BIAS, bias ? *bias : bias_);
  if (e.scratchpad.get_size() > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(e.scratchpad, eng, thread_scratchpad(e.scratchpad.get_size())));
  dnnl::memory sum_mem;
  if (partial == Partial::Finish) {  // post-op 0 (attr_for): the slices before this one
    sum_mem = dnnl::memory(plain_2d(m, n_, dt::f32, n_), eng, const_cast<void*>(sum.raw_data()));
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, sum_mem);
  }
  if (e.gate_outside) {
    run_gate_outside(e, args, m, a.gate, residual, y);
    if (!direct) {
      Tensor out = a.y;
      out.copy_from(y);
    }
    return;
  }
  std::vector<float> gate;
  dnnl::memory gate_mem, res_mem;
  if (gated) {
    int index = (a.activation == Activation::None ? 0 : 1) + (partial == Partial::Finish ? 1 : 0);
    gate.resize(static_cast<size_t>(n_));
    const Tensor g = a.gate.contiguous();
    convert(g.raw_data(), g.dtype(), gate.data(), DType::F32, static_cast<size_t>(n_));
    gate_mem = dnnl::memory(dnnl::memory::desc({1, n_}, dt::f32, tag::ab), eng, gate.data());
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, gate_mem);
    if (!residual_is_y) {
      res_mem = dnnl::memory(plain_2d(m, n_, to_dnnl(residual.dtype()), residual.stride(0)), eng,
                             const_cast<void*>(residual.raw_data()));
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index + 1) | DNNL_ARG_SRC_1, res_mem);
    }
  }
  e.prim.execute(stream(), args);
  stream().wait();
  if (!direct) {
    Tensor out = a.y;  // a view sharing a.y's storage
    out.copy_from(y);
  }
}

int64_t matmul_entries_created() { return g_entries_created.load(std::memory_order_relaxed); }

int64_t matmul_scratchpad_allocations() { return scratchpad_allocations(); }

}  // namespace fluxrt::backend::onednn
