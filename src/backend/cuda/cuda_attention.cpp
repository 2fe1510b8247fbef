// Host side of the CUDA attention kernels: AttentionArgs -> AttentionParams, then the tensor-core
// kernel (attention_tc.cu) when the shape is the FLUX one, cuBLASLt GEMMs around a softmax for wide
// heads without RoPE (the VAE's single 512-wide head), else the general CUDA-core kernel
// (attention.cu).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/cuda/attention_tc.h"
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

// FLUXRT_CUDA_ATTENTION=tc|simple (default tc): "simple" sends every call to the CUDA-core kernel,
// the switch to bypass a misbehaving tensor-core kernel. Read on every call so tests can flip it.
bool tensor_cores_allowed() {
  const char* v = std::getenv("FLUXRT_CUDA_ATTENTION");
  if (v == nullptr || *v == '\0' || std::string(v) == "tc") return true;
  FLUXRT_CHECK(std::string(v) == "simple", ErrorCode::InvalidArgument,
               "[attention] FLUXRT_CUDA_ATTENTION={} (expected tc or simple)", v);
  return false;
}

bool rows_16b_aligned(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.raw_data()) % 16 != 0) return false;
  for (int i = 0; i < 3; ++i)
    if (t.size(i) > 1 && t.stride(i) % 8 != 0) return false;
  return t.stride(3) == 1;
}

// The shapes attention_tc.cu handles: FLUX's (head dim 128, bf16/f16, no GQA, mask, bias or causal).
bool tensor_core_shape(const backend::AttentionArgs& a) {
  const DType dt = a.q.dtype();
  return (dt == DType::BF16 || dt == DType::F16) && a.q.size(3) == kern::kTcHeadDim && a.k.size(2) == a.q.size(2) &&
         a.k.size(1) >= 1 && a.scale > 0 && !a.causal && !a.key_padding_mask.defined() && !a.bias.defined() &&
         rows_16b_aligned(a.q) && rows_16b_aligned(a.k) && rows_16b_aligned(a.v) && rows_16b_aligned(a.out);
}

// Wide 16-bit heads without RoPE, mask, bias or causality (the VAE mid block: one head of 512 over
// every latent pixel): the CUDA-core kernel would read each key from shared memory once per score,
// while two tensor-core GEMMs around a softmax row pass do the same work at GEMM speed.
bool composed_shape(const backend::AttentionArgs& a) {
  const DType dt = a.q.dtype();
  // Unit columns and rows at least a head apart: what a cuBLASLt matrix (leading dimension >= its
  // rows) can describe.
  auto unit_rows = [&](const Tensor& t) { return t.stride(3) == 1 && (t.size(1) == 1 || t.stride(1) >= a.q.size(3)); };
  return (dt == DType::BF16 || dt == DType::F16) && a.q.size(3) > 256 && a.rope == backend::RopeLayout::None &&
         a.k.size(2) == a.q.size(2) && a.k.size(1) >= 1 && !a.causal && !a.key_padding_mask.defined() &&
         !a.bias.defined() && unit_rows(a.q) && unit_rows(a.k) && unit_rows(a.v) && unit_rows(a.out);
}

// S = scale q k^T (f32), P = softmax(S) rounded to the inputs' dtype, out = P v, per (batch, head)
// and per chunk of query rows (scores and probabilities of at most ~64 MiB). The exact row maximum; f32
// accumulation in both GEMMs. False, with nothing written, when cuBLASLt has no algorithm for the
// first chunk (a misaligned view): the caller takes the CUDA-core kernel.
bool run_composed(DeviceContext& c, const backend::AttentionArgs& a) {
  const int64_t B = a.q.size(0), Lq = a.q.size(1), H = a.q.size(2), D = a.q.size(3), Lk = a.k.size(1);
  const DType dt = a.q.dtype();
  if (B == 0 || Lq == 0 || H == 0) return true;
  // Scores and probabilities of a chunk: at most ~64 MiB, which keeps the GEMMs hundreds of rows
  // tall (640 at the VAE's 1024^2 L = 16384) and the VAE's memory plan honest.
  constexpr int64_t kScoreBytes = int64_t{64} << 20;
  int64_t chunk = std::clamp<int64_t>(kScoreBytes / (Lk * 6), 1, Lq);
  if (chunk > 64) chunk = chunk / 64 * 64;
  const Tensor scores = Tensor::empty({chunk, Lk}, DType::F32, a.q.device());
  const Tensor probs = Tensor::empty({chunk, Lk}, dt, a.q.device());
  const size_t es = a.q.element_size();
  auto at = [es](const Tensor& t, int64_t b, int64_t i, int64_t h) {
    return static_cast<const char*>(t.raw_data()) + (b * t.stride(0) + i * t.stride(1) + h * t.stride(2)) * es;
  };
  bool first = true;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i0 = 0; i0 < Lq; i0 += chunk) {
        const int64_t rows = std::min(chunk, Lq - i0);
        const GemmOperand q{at(a.q, b, i0, h), dt, a.q.stride(1)}, k{at(a.k, b, 0, h), dt, a.k.stride(1)};
        const GemmOperand v{at(a.v, b, 0, h), dt, a.v.stride(1)}, p{probs.raw_data(), dt, Lk};
        if (!gemm(c, rows, Lk, D, q, k, true, a.scale, scores.raw_data(), DType::F32, Lk)) {
          FLUXRT_CHECK(first, ErrorCode::Unsupported, "[attention] cuBLASLt has no algorithm for a {}x{} score chunk",
                       rows, Lk);
          return false;
        }
        kern::RowArgs r;
        r.op = kern::RowOp::Softmax;
        r.x = operand(scores.slice(0, 0, rows));
        r.y = operand(probs.slice(0, 0, rows));
        r.rows = rows;
        r.cols = Lk;
        FLUXRT_CUDA_CHECK(kern::launch_rows(r, c.stream(), c.sm_count), "attention softmax");
        void* out = const_cast<char*>(at(a.out, b, i0, h));
        if (!gemm(c, rows, D, Lk, p, v, false, 1.0f, out, a.out.dtype(), a.out.stride(1))) {
          FLUXRT_CHECK(first, ErrorCode::Unsupported, "[attention] cuBLASLt has no algorithm for a {}x{}x{} P.V",
                       rows, D, Lk);
          return false;
        }
        first = false;
      }
  return true;
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

// The kernels' fallback-row counter, read back for the stats (this synchronises the stream).
int read_fallback_rows(DeviceContext& c, const int* counter) {
  int fallback = 0;
  FLUXRT_CUDA_CHECK(cudaMemcpyAsync(&fallback, counter, sizeof(int), cudaMemcpyDeviceToHost, c.stream()), "attention");
  FLUXRT_CUDA_CHECK(cudaStreamSynchronize(c.stream()), "attention");
  return fallback;
}

void run(const backend::AttentionArgs& a, bool force_online, AttentionStats* stats) {
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.out, "out"},
                                {a.rope_cos, "rope_cos"}, {a.rope_sin, "rope_sin"}, {a.rope_q_cos, "rope_q_cos"},
                                {a.rope_q_sin, "rope_q_sin"}, {a.key_padding_mask, "key_padding_mask"}, {a.bias, "bias"}})
    require_on_device(t, "attention", name);
  FLUXRT_CHECK(a.q.size(3) <= 512 && a.q.size(3) % 2 == 0, ErrorCode::Unsupported,
               "[attention] head dim {} on CUDA (even, at most 512)", a.q.size(3));
  // Heads and batch are the grid's y and z.
  FLUXRT_CHECK(a.q.size(0) <= 65535 && a.q.size(2) <= 65535, ErrorCode::Unsupported,
               "[attention] batch {} x heads {} on CUDA (each at most 65535)", a.q.size(0), a.q.size(2));
  FLUXRT_CHECK(!a.key_padding_mask.defined() || a.key_padding_mask.element_size() == 1, ErrorCode::Unsupported,
               "[attention] key_padding_mask dtype {} on CUDA (u8/bool)", dtype_name(a.key_padding_mask.dtype()));
  FLUXRT_CHECK(!a.bias.defined() || a.bias.dtype() == DType::F32, ErrorCode::Unsupported,
               "[attention] bias dtype {} on CUDA (f32)", dtype_name(a.bias.dtype()));
  DeviceContext& c = context_of(a.q);
  if (composed_shape(a) && tensor_cores_allowed() && run_composed(c, a)) {
    if (stats) {
      const int64_t rows = a.q.size(0) * a.q.size(1) * a.q.size(2);
      stats->calls += 1;
      stats->rows += rows;
      stats->gemm_rows += rows;
      stats->online_rows += rows;  // the exact row maximum
    }
    return;
  }
  const kern::AttentionParams p = params_of(a);
  const bool online_env = online_forced_by_env();
  if (tensor_core_shape(a) && tensor_cores_allowed()) {
    // Scratch: rotated keys, max |k_j|, tile flags (attention_tc.h), then the fallback-row counter
    // (the tc scratch size is a multiple of 256 bytes, so the counter is aligned).
    const size_t bytes = kern::attention_tc_scratch_bytes(p);
    Scratch scratch(c.index, bytes + sizeof(int));
    int* counter = reinterpret_cast<int*>(static_cast<char*>(scratch.get()) + bytes);
    if (stats) FLUXRT_CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(int), c.stream()), "attention");
    const bool online = force_online || online_env || p.dtype == DType::F16;
    FLUXRT_CUDA_CHECK(kern::launch_attention_tc(p, online, scratch.get(), stats ? counter : nullptr, c.stream()),
                      "attention (tensor cores)");
    if (stats) {
      const int64_t rows = p.B * p.H * p.Lq;
      stats->calls += 1;
      stats->rows += rows;
      stats->tensor_core_rows += rows;
      stats->fallback_rows += read_fallback_rows(c, counter);
      if (online) stats->online_rows += rows;
    }
    return;
  }
  // Scratch: max |k_j| per (batch, kv head), then the fallback-row counter.
  Scratch scratch(c.index, sizeof(float) * static_cast<size_t>(p.B * p.Hkv) + sizeof(int));
  int* counter = reinterpret_cast<int*>(scratch.as<float>() + p.B * p.Hkv);
  if (stats) FLUXRT_CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(int), c.stream()), "attention");
  const bool fixed = !force_online && !online_env;
  FLUXRT_CUDA_CHECK(kern::launch_attention(p, fixed, scratch.as<float>(), stats ? counter : nullptr, c.stream()),
                    "attention");
  if (stats) {
    stats->calls += 1;
    stats->rows += p.B * p.H * p.Lq;
    stats->fallback_rows += read_fallback_rows(c, counter);
    if (!fixed || a.bias.defined()) stats->online_rows += p.B * p.H * p.Lq;
  }
}

void attention_slot(const backend::AttentionArgs& a) { run(a, false, nullptr); }

}  // namespace

void attention(const backend::AttentionArgs& a, bool force_online, AttentionStats* stats) { run(a, force_online, stats); }

void fill_attention(backend::KernelTable& t) { t.attention = attention_slot; }

}  // namespace fluxrt::cuda
