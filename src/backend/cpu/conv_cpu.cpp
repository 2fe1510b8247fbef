#include "backend/cpu/conv_cpu.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/onednn_util.h"
#include "core/error.h"
#include "core/log.h"

namespace fluxrt::backend {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// The spatial size used to ask oneDNN for a weight layout at prepare time, so the weights are
// reordered (and converted to the compute dtype) once, before the first call. It is only a first
// guess: the layout the fastest kernel wants can depend on H and W too (AMX's brgconv wants
// another one at 256x256 than at 64x64), so each call shape asks again with layout `any`.
constexpr int64_t kPrepareSize = 64;

thread_local Conv2dPhaseTimes t_phases;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

dnnl::memory::desc strided_nchw(const Tensor& t, dt type) {
  return dnnl::memory::desc({t.size(0), t.size(1), t.size(2), t.size(3)}, type,
                            dnnl::memory::dims{t.stride(0), t.stride(1), t.stride(2), t.stride(3)});
}

class OneDnnConv {
 public:
  OneDnnConv(const Tensor& weight, const Tensor& bias, DType compute);
  void run(const Conv2dArgs& a);
  std::string describe() const;
  // The implementation run(a) would use (its primitive is made and kept, nothing is computed).
  std::string kernel_for(const Conv2dArgs& a);

 private:
  struct Entry {
    dnnl::convolution_forward prim;
    dnnl::memory::desc src, dst;
    dnnl::memory weights;
    std::string impl;  // impl_info_str of prim
    dnnl::memory::desc scratchpad;
  };
  // N, H, W (after upsampling), stride, pads (t, b, l, r), residual
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, int, int, int, bool>;
  static Key key_for(const Conv2dArgs& a);
  Entry& entry(const Key& key);
  dnnl::convolution_forward::primitive_desc make_pd(const Key& key) const;
  // The weights in `layout`: the prepared memory when it matches, else a reorder of it made once
  // per layout and kept (a few layouts at most: by stride, and by size on some ISAs).
  dnnl::memory weights_in(const dnnl::memory::desc& layout);
  std::string shape_of(const Key& key) const;

  int64_t cout_, cin_, kh_, kw_;
  DType compute_;
  dnnl::memory weights_;                     // the prepare-time layout
  std::vector<dnnl::memory> other_layouts_;  // reorders of weights_ for other call shapes
  dnnl::memory bias_;
  std::string impl_;
  mutable std::mutex mutex_;
  std::map<Key, Entry> cache_;
};

// With every layout `any` (weights included), oneDNN's first implementation that accepts the
// shape is its fastest JIT kernel, which then names the layouts it wants; a fixed weight layout
// would let the reference kernel accept shapes the JIT kernels refuse for that layout.
dnnl::convolution_forward::primitive_desc OneDnnConv::make_pd(const Key& key) const {
  const auto [n, h, w, stride, pt, pb, pl, pr, residual] = key;
  const int64_t ho = (h + pt + pb - kh_) / stride + 1, wo = (w + pl + pr - kw_) / stride + 1;
  const dt cdt = onednn::to_dnnl(compute_);
  dnnl::memory::desc src({n, cin_, h, w}, cdt, tag::any);
  dnnl::memory::desc weights({cout_, cin_, kh_, kw_}, cdt, tag::any);
  dnnl::memory::desc dst({n, cout_, ho, wo}, cdt, tag::any);
  dnnl::memory::desc bias = bias_ ? bias_.get_desc() : dnnl::memory::desc();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // the thread's one buffer (onednn_util.h)
  if (residual) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                    weights, bias, dst, {stride, stride}, {pt, pl}, {pb, pr});
  return dnnl::convolution_forward::primitive_desc(d, attr, onednn::engine());
}

OneDnnConv::OneDnnConv(const Tensor& weight, const Tensor& bias, DType compute)
    : cout_(weight.size(0)), cin_(weight.size(1)), kh_(weight.size(2)), kw_(weight.size(3)), compute_(compute) {
  onednn::sync_threads();
  auto& eng = onednn::engine();
  const dt cdt = onednn::to_dnnl(compute);
  if (bias.defined()) {
    bias_ = dnnl::memory(dnnl::memory::desc({cout_}, dt::f32, tag::a), eng);
    const Tensor b = bias.contiguous();
    convert(b.raw_data(), b.dtype(), bias_.get_data_handle(), DType::F32, static_cast<size_t>(cout_));
  }
  const int pad = static_cast<int>(kh_ / 2);
  const Key probe{1, kPrepareSize, kPrepareSize, 1, pad, pad, pad, pad, false};
  auto pd = make_pd(probe);
  impl_ = pd.impl_info_str();
  const Tensor w = weight.dtype() == compute ? weight : weight.to(compute);
  dnnl::memory plain(strided_nchw(w, cdt), eng, const_cast<void*>(w.raw_data()));
  weights_ = dnnl::memory(pd.weights_desc(), eng);
  dnnl::reorder(plain, weights_).execute(onednn::stream(), plain, weights_);
  onednn::stream().wait();
}

std::string OneDnnConv::shape_of(const Key& key) const {
  const auto [n, h, w, stride, pt, pb, pl, pr, residual] = key;
  return fmt::format("{} {}x{}x{}x{} -> {} channels, {}x{} kernel, stride {}{}", dtype_name(compute_), n,
                     cin_, h, w, cout_, kh_, kw_, stride, residual ? ", residual" : "");
}

dnnl::memory OneDnnConv::weights_in(const dnnl::memory::desc& layout) {
  if (layout == weights_.get_desc()) return weights_;
  for (const dnnl::memory& m : other_layouts_) {
    if (m.get_desc() == layout) return m;
  }
  dnnl::memory m(layout, onednn::engine());
  dnnl::reorder(weights_, m).execute(onednn::stream(), weights_, m);
  onednn::stream().wait();
  other_layouts_.push_back(m);
  return m;
}

OneDnnConv::Entry& OneDnnConv::entry(const Key& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const dnnl::convolution_forward::primitive_desc pd = make_pd(key);
  onednn::check_implementation("conv2d", pd.impl_info_str(), shape_of(key));
  Entry e;
  e.weights = weights_in(pd.weights_desc());
  if (e.weights != weights_) {
    FLUXRT_LOG_DEBUG("[conv2d] another weight layout for {} ({})", shape_of(key), pd.impl_info_str());
  }
  e.prim = dnnl::convolution_forward(pd);
  e.scratchpad = pd.scratchpad_desc();
  e.src = pd.src_desc();
  e.dst = pd.dst_desc();
  e.impl = pd.impl_info_str();
  return cache_.emplace(key, std::move(e)).first->second;
}

OneDnnConv::Key OneDnnConv::key_for(const Conv2dArgs& a) {
  const int64_t scale = a.upsample_nearest_2x ? 2 : 1;
  return Key{a.x.size(0), scale * a.x.size(2), scale * a.x.size(3), a.stride, a.pad_top, a.pad_bottom,
             a.pad_left,  a.pad_right,         a.residual.defined()};
}

std::string OneDnnConv::kernel_for(const Conv2dArgs& a) { return entry(key_for(a)).impl; }

// oneDNN memory in `desc`'s (blocked) layout whose bytes come from the tensor allocator, so the
// channel-blocked copies of a call's input and output — as large as the activations themselves —
// show in its counters (the timing report's peak, the VAE's memory tests) like every tensor.
dnnl::memory blocked_memory(const dnnl::memory::desc& desc, Tensor& holder) {
  holder = Tensor::empty({static_cast<int64_t>(desc.get_size())}, DType::U8);
  return dnnl::memory(desc, onednn::engine(), holder.raw_data());
}

// Nearest 2x upsample of x (any float dtype, any strides) into a contiguous f32 NCHW tensor: each
// source row is widened once and written to two output rows.
Tensor upsample_nearest_2x_f32(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  Tensor xf = x.dtype() == DType::F32 ? x : x.to(DType::F32);
  Tensor up = Tensor::empty({n, c, 2 * h, 2 * w}, DType::F32);
  const float* src = xf.data<float>();
  float* dst = up.data<float>();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t y = 0; y < h; ++y) {
        const float* s = src + i * xf.stride(0) + ch * xf.stride(1) + y * xf.stride(2);
        float* d = dst + ((i * c + ch) * 2 * h + 2 * y) * 2 * w;
        for (int64_t x0 = 0; x0 < w; ++x0) d[2 * x0] = d[2 * x0 + 1] = s[x0 * xf.stride(3)];
        std::memcpy(d + 2 * w, d, static_cast<size_t>(2 * w) * sizeof(float));
      }
    }
  }
  return up;
}

// t in `dtype`; a channels-last t stays channels-last, so that a primitive computing in another
// dtype than the activations' (bf16 on a CPU without native bf16) still reads and writes the
// layout it runs on, instead of a further copy into it and back.
Tensor in_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty_like_layout(t, t.shape(), dtype);
  out.copy_from(t);
  return out;
}

// The input of a convolution that upsamples first: a channels-last x is upsampled as it is, in
// its own dtype (whole pixels copied; the convolution reads the result without a reorder); any
// other x goes through the f32 NCHW copy above.
Tensor upsampled_input(const Tensor& x) {
  if (!x.is_channels_last_only()) return upsample_nearest_2x_f32(x);
  Tensor up = Tensor::empty_channels_last({x.size(0), x.size(1), 2 * x.size(2), 2 * x.size(3)}, x.dtype());
  cpu::upsample_nearest_2x_channels_last(Upsample2xArgs{x, up});
  return up;
}

void OneDnnConv::run(const Conv2dArgs& a) {
  onednn::sync_threads();
  auto& eng = onednn::engine();
  auto& strm = onednn::stream();
  auto t0 = std::chrono::steady_clock::now();
  Tensor x = a.x;
  if (a.upsample_nearest_2x) x = upsampled_input(x);
  Entry& e = entry(key_for(a));

  // Input: reorder (and convert) from x's strides into the layout the primitive wants.
  if (x.dtype() != DType::F32 && x.dtype() != compute_) x = in_dtype(x, DType::F32);
  dnnl::memory x_mem(strided_nchw(x, onednn::to_dnnl(x.dtype())), eng, const_cast<void*>(x.raw_data()));
  dnnl::memory src = x_mem;
  Tensor src_buffer, dst_buffer;
  if (x_mem.get_desc() != e.src) {
    src = blocked_memory(e.src, src_buffer);
    dnnl::reorder(x_mem, src).execute(strm, x_mem, src);
  }
  // Output: y directly when it already has the primitive's layout and type, else a temporary.
  Tensor y = a.y;
  const bool y_native = y.dtype() == DType::F32 || y.dtype() == compute_;
  Tensor y32 = y_native ? y : Tensor::empty_like_layout(y, y.shape(), DType::F32);
  dnnl::memory y_mem(strided_nchw(y32, onednn::to_dnnl(y32.dtype())), eng, y32.raw_data());
  dnnl::memory dst = y_mem.get_desc() == e.dst ? y_mem : blocked_memory(e.dst, dst_buffer);
  if (a.residual.defined()) {
    // The sum post-op adds what dst holds: load the residual into it first.
    Tensor r = a.residual;
    if (r.dtype() != DType::F32 && r.dtype() != compute_) r = in_dtype(r, DType::F32);
    dnnl::memory r_mem(strided_nchw(r, onednn::to_dnnl(r.dtype())), eng, const_cast<void*>(r.raw_data()));
    // The lean pass adds the residual in place (residual is y): then it is in dst already.
    const bool in_dst =
        dst == y_mem && r.raw_data() == y32.raw_data() && r_mem.get_desc() == y_mem.get_desc();
    if (!in_dst) dnnl::reorder(r_mem, dst).execute(strm, r_mem, dst);
  }
  strm.wait();
  auto t1 = std::chrono::steady_clock::now();
  t_phases.reorder_in = std::chrono::duration<double>(t1 - t0).count();

  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, e.weights}, {DNNL_ARG_DST, dst}};
  if (bias_) args.emplace(DNNL_ARG_BIAS, bias_);
  if (e.scratchpad.get_size() > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(e.scratchpad, onednn::engine(),
                                                   onednn::thread_scratchpad(e.scratchpad.get_size())));
  e.prim.execute(strm, args);
  strm.wait();
  auto t2 = std::chrono::steady_clock::now();
  t_phases.conv = std::chrono::duration<double>(t2 - t1).count();

  if (dst != y_mem) {
    dnnl::reorder(dst, y_mem).execute(strm, dst, y_mem);
    strm.wait();
  }
  if (!y_native) y.copy_from(y32);
  t_phases.reorder_out = seconds_since(t2);
}

std::string OneDnnConv::describe() const {
  return fmt::format("onednn conv {} ({})", dtype_name(compute_), impl_);
}

}  // namespace

std::shared_ptr<PreparedConv2d> prepare_conv2d_cpu(const Tensor& weight, const Tensor& bias) {
  FLUXRT_CHECK(weight.dim() == 4, ErrorCode::InvalidArgument, "[conv2d] weight must be [Cout, Cin, KH, KW], got {}",
               weight.shape().str());
  auto p = std::make_shared<PreparedConv2d>();
  p->weight = weight;
  p->bias = bias;
  const DType compute = weight.dtype() == DType::BF16 && onednn::native_bf16() ? DType::BF16 : DType::F32;
  p->state = std::make_shared<OneDnnConv>(weight, bias, compute);
  return p;
}

void conv2d_cpu(const Conv2dArgs& a) {
  auto* conv = static_cast<OneDnnConv*>(a.w->state.get());
  FLUXRT_CHECK(conv != nullptr, ErrorCode::InvalidArgument, "[conv2d] weight was not prepared by the CPU backend");
  conv->run(a);
}

std::string conv2d_cpu_kernel_for(const Conv2dArgs& a) {
  auto* conv = static_cast<OneDnnConv*>(a.w->state.get());
  FLUXRT_CHECK(conv != nullptr, ErrorCode::InvalidArgument,
               "[conv2d] weight was not prepared by the CPU backend");
  return conv->kernel_for(a);
}

std::string describe_conv2d_cpu(const PreparedConv2d& prepared) {
  const auto* conv = static_cast<const OneDnnConv*>(prepared.state.get());
  return conv ? conv->describe() : "unprepared";
}

Conv2dPhaseTimes last_conv2d_cpu_phases() { return t_phases; }

}  // namespace fluxrt::backend
