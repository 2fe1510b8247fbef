// W8A8 linear (see linear_int8_cpu.h). The row passes (per-token quantization, the epilogue) are
// Highway code compiled once per target through foreach_target.h; the oneDNN driver sits behind
// HWY_ONCE.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/linear_int8_cpu.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/args/linear.h"
#include "backend/cpu/cpu_common.h"
#include "backend/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fluxrt::backend::cpu::HWY_NAMESPACE {

template <typename T>
void QuantizeRowsT(const T* x, int64_t ldx, int64_t rows, int64_t K, int8_t* q, float* scales, float levels) {
  parallel_for(rows, rows * K, [&](int64_t r) {
    const DF df;
    const hn::Rebind<int8_t, DF> d8;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const T* xr = x + r * ldx;
    int8_t* qr = q + r * K;
    // |x| maxima, and x * 0 summed: NaN when the row has an inf or NaN (hn::Max may drop NaN).
    VF vmax = hn::Zero(df), vnan = hn::Zero(df);
    int64_t k = 0;
    for (; k + N <= K; k += N) {
      const VF v = LoadF(df, xr + k);
      vmax = hn::Max(vmax, hn::Abs(v));
      vnan = hn::Add(vnan, hn::Mul(v, hn::Zero(df)));
    }
    float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    bool finite = std::isfinite(amax) && hn::GetLane(hn::SumOfLanes(df, vnan)) == 0.0f;
    for (int64_t t = k; t < K; ++t) {
      const float v = to_f32(xr[t]);
      finite = finite && std::isfinite(v);
      amax = std::max(amax, std::fabs(v));
    }
    if (!finite) {  // inf or NaN: the row's outputs become NaN, as a float GEMM would make them
      std::fill(qr, qr + K, int8_t{0});
      scales[r] = std::numeric_limits<float>::quiet_NaN();
      return;
    }
    const float inv = amax > 0 ? levels / amax : 0.0f;
    scales[r] = amax > 0 ? amax / levels : 1.0f;
    const VF vinv = hn::Set(df, inv);
    for (k = 0; k + N <= K; k += N)
      hn::StoreU(hn::DemoteTo(d8, hn::NearestInt(hn::Mul(LoadF(df, xr + k), vinv))), d8, qr + k);
    for (; k < K; ++k) qr[k] = static_cast<int8_t>(std::nearbyint(to_f32(xr[k]) * inv));
  });
}

void QuantizeRows(const void* x, DType dtype, int64_t ldx, int64_t rows, int64_t K, int8_t* q, float* scales,
                  float levels) {
  dispatch_float(dtype, "quantize_rows_int8", [&]<typename T>() {
    QuantizeRowsT(static_cast<const T*>(x), ldx, rows, K, q, scales, levels);
  });
}

// y[r, :] = act(acc[r, :] * sx[r] + bias) (then residual + gate * that) for rows [0, rows).
template <typename T>
void EpilogueT(const float* acc, int64_t rows, int64_t N, const float* sx, const float* bias, Activation act,
               const T* res, int64_t ldr, const float* gate, T* y, int64_t ldy) {
  parallel_for(rows, rows * N, [&](int64_t r) {
    const DF df;
    const int64_t L = static_cast<int64_t>(hn::Lanes(df));
    const float* a = acc + r * N;
    const VF vs = hn::Set(df, sx[r]);
    auto one = [&](VF v, const VF* b, const VF* g, VF rv) {
      v = hn::Mul(v, vs);
      if (b) v = hn::Add(v, *b);
      if (act == Activation::GeluTanh) v = GeluTanh(df, v);
      if (act == Activation::Silu) v = Silu(df, v);
      if (g) v = hn::MulAdd(*g, v, rv);
      return v;
    };
    int64_t n = 0;
    for (; n + L <= N; n += L) {
      const VF b = bias ? hn::LoadU(df, bias + n) : hn::Zero(df);
      const VF g = gate ? hn::LoadU(df, gate + n) : hn::Zero(df);
      const VF rv = gate ? LoadF(df, res + r * ldr + n) : hn::Zero(df);
      StoreF(df, one(hn::LoadU(df, a + n), bias ? &b : nullptr, gate ? &g : nullptr, rv), y + r * ldy + n);
    }
    if (n < N) {
      const size_t c = static_cast<size_t>(N - n);
      const VF b = bias ? LoadFN(df, bias + n, c) : hn::Zero(df);
      const VF g = gate ? LoadFN(df, gate + n, c) : hn::Zero(df);
      const VF rv = gate ? LoadFN(df, res + r * ldr + n, c) : hn::Zero(df);
      StoreFN(df, one(LoadFN(df, a + n, c), bias ? &b : nullptr, gate ? &g : nullptr, rv), y + r * ldy + n,
              c);
    }
  });
}

void Epilogue(const float* acc, int64_t rows, int64_t N, const float* sx, const float* bias, Activation act,
              const void* res, int64_t ldr, const float* gate, void* y, int64_t ldy, DType ydt) {
  dispatch_float(ydt, "linear int8 epilogue", [&]<typename T>() {
    EpilogueT(acc, rows, N, sx, bias, act, static_cast<const T*>(res), ldr, gate, static_cast<T*>(y), ldy);
  });
}

}  // namespace fluxrt::backend::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <fmt/format.h>

#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/linear_int8_cpu.h"
#include "backend/cpu/onednn_util.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strict_kernels.h"

namespace fluxrt::backend {
namespace cpu {
HWY_EXPORT(QuantizeRows);
HWY_EXPORT(Epilogue);
}  // namespace cpu

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// Grow-only per-thread buffers of the calling thread: the quantized x, its scales, the f32
// temporary of one block of rows.
struct Int8Scratch {
  std::vector<int8_t> q, padded;  // padded: one block's rows, zero-filled to the primitive's M
  std::vector<float> scales, acc;
};
// Sized for M rows of K inputs and N outputs (blocks of kInt8RowsPerCall rows).
Int8Scratch& int8_scratch(int64_t M, int64_t N, int64_t K) {
  thread_local Int8Scratch s;
  const int64_t block = std::min(M, kInt8RowsPerCall);
  if (s.q.size() < static_cast<size_t>(M * K)) s.q.resize(static_cast<size_t>(M * K));
  if (s.scales.size() < static_cast<size_t>(M)) s.scales.resize(static_cast<size_t>(M));
  if (s.acc.size() < static_cast<size_t>(block * N)) s.acc.resize(static_cast<size_t>(block * N));
  return s;
}

}  // namespace

struct Int8LinearCpu {
  int64_t n = 0, k = 0;
  std::vector<float> w_scales;  // [n]
  std::vector<float> bias;      // [n] or empty
  dnnl::memory weights;         // s8 in the layout of the kInt8RowsPerCall-row primitive
  std::string impl;
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory weights;  // `weights`, or a copy in the layout this M wants
    int64_t rows = 0;      // the M prim computes: this M, or kInt8RowsPerCall (rows zero-padded)
  };
  mutable std::mutex mutex;
  mutable std::map<int64_t, Entry> entries;  // by M

  dnnl::primitive_attr attr() const {
    dnnl::primitive_attr a;
    a.set_output_scales(1 << 1, w_scales);  // s_w per column of the [M, N] result
    return a;
  }
  dnnl::matmul::primitive_desc plan(int64_t m, const dnnl::memory::desc& w) const {
    const dnnl::memory::desc src({m, k}, dt::s8, tag::ab), dst({m, n}, dt::f32, tag::ab);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, w, dst), attr(), onednn::engine());
  }
  const Entry& entry(int64_t m) const {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = entries.find(m);
    if (it != entries.end()) return it->second;
    Entry e;
    dnnl::matmul::primitive_desc pd;
    bool fixed = true;
    try {
      pd = plan(m, weights.get_desc());
      fixed = !onednn::is_reference_impl(pd.impl_info_str());
    } catch (const dnnl::error&) {
      fixed = false;
    }
    e.rows = m;
    e.weights = weights;
    if (!fixed) {  // this M wants another weight layout: one more copy, in that layout
      dnnl::memory second;
      try {
        pd = plan(m, dnnl::memory::desc({k, n}, dt::s8, tag::any));
        second = dnnl::memory(pd.weights_desc(), onednn::engine());
        dnnl::memory from = weights;  // a handle copy: reorder::execute takes non-const memories
        dnnl::reorder(from, second).execute(onednn::stream(), from, second);
        onednn::stream().wait();
        if (onednn::first_report(fmt::format("linear int8 second layout|{}|{}|{}", m, k, n)))
          FLUXRT_LOG_WARN("[linear] oneDNN int8 needs a second weight layout for M={} (K={}, N={})", m, k, n);
        e.weights = second;
      } catch (const dnnl::error&) {
        // No reorder between the two blocked layouts (on AMX they carry different s8
        // compensations): run the prepared M on these rows padded with zero rows instead.
        pd = plan(kInt8RowsPerCall, weights.get_desc());
        e.rows = kInt8RowsPerCall;
      }
    }
    onednn::check_implementation("linear int8", pd.impl_info_str(),
                                 fmt::format("s8 M={} K={} N={}", m, k, n));
    e.prim = dnnl::matmul(pd);
    return entries.emplace(m, std::move(e)).first->second;
  }
};

void quantize_rows_int8(const Tensor& x, int8_t* q, float* scales, int levels) {
  FLUXRT_CHECK(x.dim() == 2 && x.stride(1) == 1, ErrorCode::InvalidArgument,
               "[linear int8] rows must be a [M, K] tensor with unit column stride, got {}", x.shape().str());
  FLUXRT_CHECK(levels >= 1 && levels <= 127, ErrorCode::InvalidArgument,
               "[linear int8] levels {} not in [1, 127]", levels);
  HWY_DYNAMIC_DISPATCH(cpu::QuantizeRows)
  (x.raw_data(), x.dtype(), x.stride(0), x.size(0), x.size(1), q, scales, static_cast<float>(levels));
}

int int8_weight_levels() { return onednn::native_int8() ? 127 : 63; }

void quantize_weight_int8(const Tensor& weight, int8_t* q, float* scales) {
  quantize_rows_int8(weight.stride(1) == 1 ? weight : weight.contiguous(), q, scales, int8_weight_levels());
}

std::shared_ptr<Int8LinearCpu> prepare_int8_linear_cpu(const Tensor& weight, const Tensor& bias) {
  FLUXRT_CHECK(weight.dim() == 2, ErrorCode::InvalidArgument, "[linear int8] weight must be [N, K], got {}",
               weight.shape().str());
  auto w = std::make_shared<Int8LinearCpu>();
  w->n = weight.size(0);
  w->k = weight.size(1);
  onednn::sync_threads();
  std::vector<int8_t> plain(static_cast<size_t>(w->n * w->k));
  w->w_scales.resize(static_cast<size_t>(w->n));
  quantize_weight_int8(weight, plain.data(), w->w_scales.data());
  for (float s : w->w_scales)
    FLUXRT_CHECK(std::isfinite(s), ErrorCode::InvalidArgument,
                 "[linear int8] the weight has inf or NaN values");
  if (bias.defined()) {
    w->bias.resize(static_cast<size_t>(w->n));
    const Tensor b = bias.contiguous();
    convert(b.raw_data(), b.dtype(), w->bias.data(), DType::F32, static_cast<size_t>(w->n));
  }
  dnnl::matmul::primitive_desc pd;
  std::string why;
  try {
    pd = w->plan(kInt8RowsPerCall, dnnl::memory::desc({w->k, w->n}, dt::s8, tag::any));
    w->impl = pd.impl_info_str();
    if (onednn::is_reference_impl(w->impl)) why = "only its reference int8 matmul (" + w->impl + ")";
  } catch (const dnnl::error& e) {
    why = std::string("no int8 matmul (") + e.what() + ")";
  }
  if (!why.empty()) {
    // The caller keeps the weight's usual path, so the int8 asked for would not run there: said
    // once per shape (not for every layer of it), and an error in strict mode, which turns every
    // silent fallback into one.
    FLUXRT_CHECK(!strict_kernels(), ErrorCode::Unsupported,
                 "[linear] oneDNN has {} for K={} N={} (ISA {}) and FLUXRT_STRICT_KERNELS=1 forbids "
                 "keeping the usual path instead of int8",
                 why, w->k, w->n, onednn::isa_name());
    if (onednn::first_report(fmt::format("linear int8 none|{}|{}", w->k, w->n)))
      FLUXRT_LOG_WARN("[linear] oneDNN has {} for K={} N={} (ISA {}): these weights keep the usual path", why,
                      w->k, w->n, onednn::isa_name());
    return nullptr;
  }
  // The plain [N, K] rows are oneDNN's K x N weights with strides (1, K).
  dnnl::memory src(dnnl::memory::desc({w->k, w->n}, dt::s8, dnnl::memory::dims{1, w->k}), onednn::engine(),
                   plain.data());
  w->weights = dnnl::memory(pd.weights_desc(), onednn::engine());
  dnnl::reorder(src, w->weights).execute(onednn::stream(), src, w->weights);
  onednn::stream().wait();
  return w;
}

void int8_linear_cpu(const LinearArgs& a, const Int8LinearCpu& w) {
  const int64_t M = a.x.size(0), N = w.n, K = w.k;
  if (M == 0) return;
  onednn::sync_threads();
  Int8Scratch& s = int8_scratch(M, N, K);
  const int64_t block = std::min(M, kInt8RowsPerCall);
  quantize_rows_int8(a.x, s.q.data(), s.scales.data());

  const bool gated = a.gate.defined();
  std::vector<float> gate;
  Tensor residual;
  if (gated) {
    gate.resize(static_cast<size_t>(N));
    const Tensor g = a.gate.contiguous();
    convert(g.raw_data(), g.dtype(), gate.data(), DType::F32, static_cast<size_t>(N));
    // The epilogue reads the residual in y's dtype (it may alias y: each element is read before
    // it is written, by the same thread).
    residual = a.residual.dtype() == a.y.dtype() ? a.residual : a.residual.to(a.y.dtype());
  }
  auto& eng = onednn::engine();
  for (int64_t r0 = 0; r0 < M; r0 += block) {
    const int64_t rows = std::min(block, M - r0);
    const Int8LinearCpu::Entry& e = w.entry(rows);
    int8_t* q = s.q.data() + r0 * K;
    if (e.rows > rows) {  // zero rows after ours; their results land in acc rows never read
      s.padded.assign(static_cast<size_t>(e.rows * K), 0);
      std::memcpy(s.padded.data(), q, static_cast<size_t>(rows * K));
      q = s.padded.data();
      if (s.acc.size() < static_cast<size_t>(e.rows * N)) s.acc.resize(static_cast<size_t>(e.rows * N));
    }
    const dnnl::memory src(dnnl::memory::desc({e.rows, K}, dt::s8, tag::ab), eng, q);
    const dnnl::memory dst(dnnl::memory::desc({e.rows, N}, dt::f32, tag::ab), eng, s.acc.data());
    e.prim.execute(onednn::stream(),
                   {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, e.weights}, {DNNL_ARG_DST, dst}});
    onednn::stream().wait();
    const size_t ye = a.y.element_size();
    char* y = static_cast<char*>(a.y.raw_data()) + static_cast<size_t>(r0 * a.y.stride(0)) * ye;
    const char* res = gated ? static_cast<const char*>(residual.raw_data()) +
                                  static_cast<size_t>(r0 * residual.stride(0)) * ye
                            : nullptr;
    HWY_DYNAMIC_DISPATCH(cpu::Epilogue)
    (s.acc.data(), rows, N, s.scales.data() + r0, w.bias.empty() ? nullptr : w.bias.data(), a.activation, res,
     gated ? residual.stride(0) : 0, gated ? gate.data() : nullptr, y, a.y.stride(0), a.y.dtype());
  }
}

void plan_int8_linear_cpu(const LinearArgs& a, const Int8LinearCpu& w) {
  const int64_t M = a.x.size(0);
  if (M == 0) return;
  onednn::sync_threads();
  Int8Scratch& s = int8_scratch(M, w.n, w.k);
  const int64_t block = std::min(M, kInt8RowsPerCall);
  int64_t widest = w.entry(block).rows;
  if (M % block != 0) widest = std::max(widest, w.entry(M % block).rows);
  if (s.acc.size() < static_cast<size_t>(widest * w.n)) s.acc.resize(static_cast<size_t>(widest * w.n));
  if (widest > block) s.padded.reserve(static_cast<size_t>(widest * w.k));
}

std::string describe_int8_linear_cpu(const Int8LinearCpu& w) {
  return fmt::format("onednn-int8 w8a8 ({}, {:.1f} MB)", w.impl, w.weights.get_desc().get_size() / 1e6);
}

std::string int8_linear_impl(const Int8LinearCpu& w) { return w.impl; }

}  // namespace fluxrt::backend
#endif  // HWY_ONCE
