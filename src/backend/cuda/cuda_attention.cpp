// Host side of the CUDA attention kernel (attention.cu): AttentionArgs -> AttentionParams.
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda_backend.h"

namespace fluxrt::cuda {
namespace {

bool online_forced_by_env() {
  static const bool forced = [] {
    const char* v = std::getenv("FLUXRT_CUDA_ATTENTION_ONLINE");
    return v && std::string(v) == "1";
  }();
  return forced;
}

kern::AttentionParams params_of(const backend::AttentionArgs& a) {
  kern::AttentionParams p;
  p.q = a.q.raw_data();
  p.k = a.k.raw_data();
  p.v = a.v.raw_data();
  p.out = a.out.raw_data();
  p.dtype = a.q.dtype();
  p.B = a.q.size(0);
  p.Lq = a.q.size(1);
  p.H = a.q.size(2);
  p.D = a.q.size(3);
  p.Lk = a.k.size(1);
  p.Hkv = a.k.size(2);
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = a.q.stride(i);
    p.k_stride[i] = a.k.stride(i);
    p.v_stride[i] = a.v.stride(i);
    p.o_stride[i] = a.out.stride(i);
  }
  p.scale = a.scale;
  p.rope = a.rope == backend::RopeLayout::None            ? kern::Rope::None
           : a.rope == backend::RopeLayout::AdjacentPairs ? kern::Rope::AdjacentPairs
                                                          : kern::Rope::HalfSplit;
  auto table_strides = [](const Tensor& t, int64_t* s) {
    s[0] = t.dim() == 3 ? t.stride(0) : 0;
    s[1] = t.stride(t.dim() == 3 ? 1 : 0);
  };
  if (p.rope != kern::Rope::None) {
    p.k_cos = a.rope_cos.data<float>();
    p.k_sin = a.rope_sin.data<float>();
    table_strides(a.rope_cos, p.k_rope_stride);
    if (a.rope_q_cos.defined()) {
      p.q_cos = a.rope_q_cos.data<float>();
      p.q_sin = a.rope_q_sin.data<float>();
      table_strides(a.rope_q_cos, p.q_rope_stride);
      p.q_pos_offset = 0;
    } else {
      p.q_cos = p.k_cos;
      p.q_sin = p.k_sin;
      p.q_rope_stride[0] = p.k_rope_stride[0];
      p.q_rope_stride[1] = p.k_rope_stride[1];
      p.q_pos_offset = p.Lk - p.Lq;
    }
  }
  p.causal = a.causal;
  if (a.key_padding_mask.defined()) {
    p.mask = a.key_padding_mask.raw_data();
    p.mask_stride[0] = a.key_padding_mask.stride(0);
    p.mask_stride[1] = a.key_padding_mask.stride(1);
  }
  if (a.bias.defined()) {
    p.bias = a.bias.data<float>();
    for (int i = 0; i < 4; ++i) p.bias_stride[i] = a.bias.size(i) == 1 ? 0 : a.bias.stride(i);
  }
  return p;
}

void run(const backend::AttentionArgs& a, bool force_online, AttentionStats* stats) {
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.out, "out"},
                                {a.rope_cos, "rope_cos"}, {a.rope_sin, "rope_sin"}, {a.rope_q_cos, "rope_q_cos"},
                                {a.rope_q_sin, "rope_q_sin"}, {a.key_padding_mask, "key_padding_mask"}, {a.bias, "bias"}})
    require_on_device(t, "attention", name);
  FLUXRT_CHECK(a.q.size(3) <= 256 && a.q.size(3) % 2 == 0, ErrorCode::Unsupported,
               "[attention] head dim {} on CUDA (even, at most 256)", a.q.size(3));
  FLUXRT_CHECK(!a.key_padding_mask.defined() || a.key_padding_mask.element_size() == 1, ErrorCode::Unsupported,
               "[attention] key_padding_mask dtype {} on CUDA (u8/bool)", dtype_name(a.key_padding_mask.dtype()));
  FLUXRT_CHECK(!a.bias.defined() || a.bias.dtype() == DType::F32, ErrorCode::Unsupported,
               "[attention] bias dtype {} on CUDA (f32)", dtype_name(a.bias.dtype()));
  DeviceContext& c = context_of(a.q);
  const kern::AttentionParams p = params_of(a);
  // Scratch: max |k_j| per (batch, kv head), then the fallback-row counter.
  Scratch scratch(c.index, sizeof(float) * static_cast<size_t>(p.B * p.Hkv) + sizeof(int));
  int* counter = reinterpret_cast<int*>(scratch.as<float>() + p.B * p.Hkv);
  if (stats) FLUXRT_CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(int), c.stream), "attention");
  const bool fixed = !force_online && !online_forced_by_env();
  FLUXRT_CUDA_CHECK(kern::launch_attention(p, fixed, scratch.as<float>(), stats ? counter : nullptr, c.stream),
                    "attention");
  if (stats) {
    int fallback = 0;
    FLUXRT_CUDA_CHECK(cudaMemcpyAsync(&fallback, counter, sizeof(int), cudaMemcpyDeviceToHost, c.stream), "attention");
    FLUXRT_CUDA_CHECK(cudaStreamSynchronize(c.stream), "attention");
    stats->calls += 1;
    stats->rows += p.B * p.H * p.Lq;
    stats->fallback_rows += fallback;
    if (!fixed || a.bias.defined()) stats->online_rows += p.B * p.H * p.Lq;
  }
}

void attention_slot(const backend::AttentionArgs& a) { run(a, false, nullptr); }

}  // namespace

void attention(const backend::AttentionArgs& a, bool force_online, AttentionStats* stats) { run(a, force_online, stats); }

void fill_attention(backend::KernelTable& t) { t.attention = attention_slot; }

}  // namespace fluxrt::cuda
