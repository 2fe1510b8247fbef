#include "backend/cpu/linear_cpu.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/gemm_packed.h"
#include "backend/cpu/linear_int8_cpu.h"
#include "backend/cpu/linear_quant_cpu.h"
#include "backend/cpu/onednn_matmul.h"
#include "backend/cpu/onednn_util.h"
#include "core/error.h"

namespace fluxrt::backend {
namespace {

// Widest weight one oneDNN matmul gets: wider ones are split into equal column groups of at most
// this many output features, each its own matmul writing its columns of y (oneDNN's gemm:jit, as
// a group's y rows are strided). Measured with the weights streaming from memory as in a step
// (AMX Xeon, bench_gemm --copies, 2 threads), ms at M = 256 / 768 / 1536 / 4608:
//   3072 -> 18432: whole (brgemm) 32.1 / 85.3 / 173.1 / 409.3, groups of 9216 29.9 / 63.0 /
//                  116.3 / 371.4, of 4608 28.3 / 59.8 / 107.8 / 349.3 (of 3072: 29.5 / 62.5 / 115.0)
//   3072 -> 27648: groups of 9216 42.9 / 91.1 / 177.3 / 551.8, of 4608 42.4 / 89.1 / 160.9 / 520.7
// and at M = 512 the text encoders' and FLUX.1's widest, whole -> groups of 4608: 2560 -> 9728
// 21.0 -> 19.4, 4096 -> 10240 40.5 -> 31.4, 3072 -> 12288 37.7 -> 30.0. (From cache, without
// --copies, one brgemm read faster: the 480 MiB L3 holds a layer.)
constexpr int64_t kMaxMatmulColumns = 4608;

// Deepest bf16 weight one oneDNN matmul gets: deeper ones run as equal slices of K of at most this
// depth, each its own matmul adding into an f32 [M, N] sum, the last one applying the layer's
// bias, activation and gated residual to the whole sum (onednn::MatmulLinear::Partial). With the
// weights streaming from memory as in a model step (AMX Xeon, bench_gemm --shape 12288x3072
// --copies 16 --gated 1), M = 256 / 768 / 1536 / 4096 took 21.1 / 52.3 / 94.1 / 253.7 ms whole
// and 19.5 / 41.5 / 77.3 / 194.1 ms as three slices (docs/cpu.md, "Deep linears"); slices of 2048
// or 3072 were no better.
constexpr int64_t kMaxMatmulDepth = 4096;

// One part [start, start + size) of a oneDNN-prepared weight: a column group (of N) or a slice
// of the depth (of K).
struct MatmulPart {
  int64_t start = 0, size = 0;
  std::unique_ptr<onednn::MatmulLinear> matmul;
};

// The size of the parts `total` is split into, at most `max_size` each: equal, multiples of 64
// (oneDNN's widest block) except the last; `total` itself when it fits.
int64_t equal_part_size(int64_t total, int64_t max_size) {
  const int64_t parts = (total + max_size - 1) / max_size;
  return parts <= 1 ? total : ((total + parts - 1) / parts + 63) / 64 * 64;
}

// The arguments of column group `p`.
LinearArgs part_args(const LinearArgs& a, const MatmulPart& p) { return column_slice(a, p.start, p.size); }

// `joined` and one more part's kernel: a part whose kernel differs (a reference kernel in any
// part) shows, each kernel once.
void add_kernel(std::string& joined, const std::string& one) {
  if (joined.empty())
    joined = one;
  else if (one != joined && joined.find(" / " + one) == std::string::npos)
    joined += " / " + one;
}

size_t weight_bytes(const std::vector<MatmulPart>& parts) {
  size_t bytes = 0;
  for (const MatmulPart& part : parts) bytes += part.matmul->weight_bytes();
  return bytes;
}

struct CpuLinearState {
  CpuLinearImpl impl = CpuLinearImpl::Packed;
  gemm::PackedWeights packed;
  gemm::AmxWeights amx;
  std::vector<MatmulPart> matmul;  // one part, or column groups of a weight wider than kMaxMatmulColumns
  std::vector<MatmulPart>
      depth;  // instead of `matmul`: the K slices of a bf16 weight deeper than kMaxMatmulDepth
  std::shared_ptr<QuantLinearCpu> quant;  // set for a weight kept quantized (impl unused)
  std::shared_ptr<Int8LinearCpu> int8;    // set for W8A8 (impl unused)
};

// The quantized types W8A8 takes over: those of one byte per weight or more, which int8 does not
// make larger (the 2-6 bit types keep their own path).
bool w8a8_applies(QuantType type) {
  return type == QuantType::Q8_0 || type == QuantType::F8E4M3 || type == QuantType::F8E5M2 ||
         type == QuantType::F16 || type == QuantType::BF16 || type == QuantType::F32;
}

CpuLinearImpl impl_from_env() {
  const char* v = std::getenv("FLUXRT_LINEAR_IMPL");
  if (!v) return CpuLinearImpl::Auto;
  const std::string_view s(v);
  if (s == "onednn") return CpuLinearImpl::OneDnn;
  if (s == "packed") return CpuLinearImpl::Packed;
  if (s == "w8a8") return CpuLinearImpl::W8A8;
  if (s == "amx") return CpuLinearImpl::Amx;
  return CpuLinearImpl::Auto;
}

CpuLinearImpl choose(const Tensor& weight, CpuLinearImpl requested) {
  if (requested == CpuLinearImpl::W8A8) return CpuLinearImpl::W8A8;
  if (requested == CpuLinearImpl::Packed && !gemm::packed_gemm_supported()) return CpuLinearImpl::OneDnn;
  // The AMX GEMM packs bf16 weights only; asked for elsewhere, the default applies.
  if (requested == CpuLinearImpl::Amx && (weight.dtype() != DType::BF16 || !gemm::amx_gemm_supported()))
    requested = CpuLinearImpl::Auto;
  if (requested != CpuLinearImpl::Auto) return requested;
  // f32 weights: oneDNN's f32 matmul reorders them at no extra memory cost.
  if (weight.dtype() == DType::F32) return CpuLinearImpl::OneDnn;
  // bf16 (or f16) weights: our tile GEMM where the CPU has AMX, oneDNN bf16 where it has bf16
  // without tiles, else our AVX2 kernel keeps them 16-bit.
  if (weight.dtype() == DType::BF16 && gemm::amx_gemm_supported()) return CpuLinearImpl::Amx;
  if (weight.dtype() == DType::BF16 && onednn::native_bf16()) return CpuLinearImpl::OneDnn;
  return gemm::packed_gemm_supported() ? CpuLinearImpl::Packed : CpuLinearImpl::OneDnn;
}

using Partial = onednn::MatmulLinear::Partial;

// The arguments of depth slice `i` of `slices` and how it joins the f32 partial sum `sum`: the
// slices before the last write (the first) or add their x_s W_s^T into it; the last computes y.
LinearArgs slice_args(const LinearArgs& a, const std::vector<MatmulPart>& slices, size_t i, const Tensor& sum,
                      Partial* partial) {
  LinearArgs s = a;
  s.x = a.x.slice(1, slices[i].start, slices[i].start + slices[i].size);
  if (i + 1 == slices.size()) {
    *partial = Partial::Finish;
    return s;
  }
  *partial = i == 0 ? Partial::None : Partial::Accumulate;
  s.y = sum;
  s.activation = Activation::None;
  s.gate = Tensor();
  s.residual = Tensor();
  return s;
}

void run_depth_slices(const LinearArgs& a, const std::vector<MatmulPart>& slices, bool plan_only) {
  const Tensor sum = Tensor::empty({a.x.size(0), a.w->out_features()}, DType::F32);  // [M, N]
  for (size_t i = 0; i < slices.size(); ++i) {
    Partial partial = Partial::None;
    const LinearArgs s = slice_args(a, slices, i, sum, &partial);
    if (plan_only)
      slices[i].matmul->plan(s, partial);
    else
      slices[i].matmul->run(s, partial, sum);
  }
}

}  // namespace

bool cpu_native_bf16() { return onednn::native_bf16(); }
const char* cpu_isa_name() { return onednn::isa_name(); }

std::shared_ptr<PreparedLinear> prepare_linear_cpu_with(const Tensor& weight, const Tensor& bias,
                                                        CpuLinearImpl impl) {
  FLUXRT_CHECK(weight.dim() == 2, ErrorCode::InvalidArgument, "[linear] weight must be [N, K], got {}",
               weight.shape().str());
  auto p = std::make_shared<PreparedLinear>();
  p->weight = weight;
  p->bias = bias;
  auto state = std::make_shared<CpuLinearState>();
  state->impl = choose(weight, impl == CpuLinearImpl::Auto ? impl_from_env() : impl);
  if (state->impl == CpuLinearImpl::W8A8) {
    state->int8 = prepare_int8_linear_cpu(weight, bias);
    if (state->int8) {
      p->state = state;
      return p;
    }
    // No JIT int8 matmul for this shape: prepare_int8_linear_cpu warned (once per shape) or, in
    // strict mode, threw.
    state->impl = choose(weight, CpuLinearImpl::Auto);
  }
  if (state->impl == CpuLinearImpl::Amx) {
    state->amx = gemm::pack_weights_amx(weight, bias);
  } else if (state->impl == CpuLinearImpl::Packed) {
    state->packed = gemm::pack_weights(weight, bias);
  } else {
    const DType compute = weight.dtype() == DType::BF16 && onednn::native_bf16() ? DType::BF16 : DType::F32;
    const int64_t N = weight.size(0), K = weight.size(1);
    const int64_t width = equal_part_size(N, kMaxMatmulColumns);
    const bool split_n = width < N;
    if (!split_n && compute == DType::BF16 && K > kMaxMatmulDepth) {
      const int64_t depth = equal_part_size(K, kMaxMatmulDepth);
      for (int64_t k0 = 0; k0 < K; k0 += depth) {
        MatmulPart slice;
        slice.start = k0;
        slice.size = std::min(depth, K - k0);
        const bool last = k0 + slice.size == K;  // the bias joins the sum once, in the epilogue
        // A slice reads its columns of x in place (rows K apart): prepared for that row stride.
        slice.matmul = std::make_unique<onednn::MatmulLinear>(weight.slice(1, k0, k0 + slice.size),
                                                              last ? bias : Tensor(), compute, 0, K);
        state->depth.push_back(std::move(slice));
      }
      p->state = state;
      return p;
    }
    for (int64_t n0 = 0; n0 < N; n0 += width) {
      MatmulPart part;
      part.start = n0;
      part.size = std::min(width, N - n0);
      const Tensor b = bias.defined() ? bias.reshape({N}).slice(0, n0, n0 + part.size) : Tensor();
      // A group writes its columns of the full-width y in place: prepared for that row stride.
      part.matmul = std::make_unique<onednn::MatmulLinear>(
          split_n ? weight.slice(0, n0, n0 + part.size) : weight, b, compute, split_n ? N : 0);
      state->matmul.push_back(std::move(part));
    }
  }
  p->state = state;
  return p;
}

std::shared_ptr<PreparedLinear> prepare_linear_cpu(const Tensor& weight, const Tensor& bias) {
  return prepare_linear_cpu_with(weight, bias, CpuLinearImpl::Auto);
}

namespace {

// W8A8 of a quantized weight, requantized per row from its dequantized blocks (one byte per weight,
// as Q8_0 is); null where oneDNN has no JIT int8 matmul for the shape (prepare_int8_linear_cpu
// said so).
std::shared_ptr<PreparedLinear> int8_of_quantized(const QuantizedMatrix& weight, const Tensor& bias) {
  auto state = std::make_shared<CpuLinearState>();
  state->int8 = prepare_int8_linear_cpu(dequantize_ref(weight), bias);
  if (!state->int8) return nullptr;
  auto p = std::make_shared<PreparedLinear>();
  p->weight = Tensor::zeros({1, 1}, DType::BF16).expand({weight.rows, weight.cols});
  p->bias = bias;
  // The int8 copy replaces the blocks: keep their description (shape, type, byte count), not
  // their bytes, so the resident weight is the int8 one alone.
  QuantizedMatrix described = weight;
  described.bytes = Tensor();
  p->quantized = std::make_shared<QuantizedMatrix>(described);
  state->impl = CpuLinearImpl::W8A8;
  p->state = state;
  return p;
}

// A quantized weight kept in its bytes: oneDNN where the CPU has bf16 matmul (its matrix units),
// the packed AVX2 GEMM elsewhere, or the one `requested` names.
std::shared_ptr<PreparedLinear> prepare_kept_quantized(const QuantizedMatrix& weight, const Tensor& bias,
                                                       CpuLinearImpl requested) {
  const bool onednn = requested == CpuLinearImpl::OneDnn ||
                      (requested == CpuLinearImpl::Auto && onednn::native_bf16()) ||
                      !gemm::packed_gemm_supported();
  auto quant = prepare_quant_linear_cpu(weight, bias, onednn);
  if (!quant) {
    Tensor wide = dequantize_ref(weight).to(DType::BF16);
    auto p = prepare_linear_cpu(wide, bias);
    p->quantized = std::make_shared<QuantizedMatrix>(weight);
    return p;
  }
  auto p = std::make_shared<PreparedLinear>();
  // A stride-0 broadcast of one element: the [N, K] shape the ops layer checks, no memory.
  p->weight = Tensor::zeros({1, 1}, DType::BF16).expand({weight.rows, weight.cols});
  p->bias = bias;
  p->quantized = std::make_shared<QuantizedMatrix>(weight);
  auto state = std::make_shared<CpuLinearState>();
  state->quant = std::move(quant);
  p->state = state;
  return p;
}

}  // namespace

std::shared_ptr<PreparedLinear> prepare_linear_quantized_cpu(const QuantizedMatrix& weight,
                                                             const Tensor& bias) {
  // FLUXRT_LINEAR_IMPL picks the implementation as for dense weights.
  const CpuLinearImpl requested = impl_from_env();
  if (requested == CpuLinearImpl::W8A8 && w8a8_applies(weight.type))
    if (auto p = int8_of_quantized(weight, bias)) return p;
  return prepare_kept_quantized(weight, bias, requested);
}

std::shared_ptr<PreparedLinear> prepare_linear_int8_cpu(const Tensor& weight, const Tensor& bias) {
  return prepare_linear_cpu_with(weight, bias, CpuLinearImpl::W8A8);
}

std::shared_ptr<PreparedLinear> prepare_linear_quantized_int8_cpu(const QuantizedMatrix& weight,
                                                                  const Tensor& bias) {
  if (w8a8_applies(weight.type))
    if (auto p = int8_of_quantized(weight, bias)) return p;
  // The 2-6 bit types stay in their bytes (int8 would make them larger), as with the env var.
  return prepare_kept_quantized(weight, bias, impl_from_env());
}

void linear_cpu(const LinearArgs& a) {
  auto* state = static_cast<CpuLinearState*>(a.w->state.get());
  FLUXRT_CHECK(state != nullptr, ErrorCode::InvalidArgument, "[linear] weight was not prepared by the CPU backend");
  if (state->quant) {
    quant_linear_cpu(a, *state->quant);
    return;
  }
  if (state->int8) {
    int8_linear_cpu(a, *state->int8);
    return;
  }
  if (state->impl == CpuLinearImpl::Amx) {
    gemm::amx_gemm(a.x, state->amx, a.activation, a.residual, a.gate, a.y);
  } else if (state->impl == CpuLinearImpl::Packed) {
    gemm::packed_gemm(a.x, state->packed, a.activation, a.residual, a.gate, a.y);
  } else if (!state->depth.empty()) {
    run_depth_slices(a, state->depth, false);
  } else if (state->matmul.size() == 1) {
    state->matmul[0].matmul->run(a);
  } else {
    for (const MatmulPart& part : state->matmul) part.matmul->run(part_args(a, part));
  }
}

void plan_linear_cpu(const LinearArgs& a) {
  auto* state = static_cast<CpuLinearState*>(a.w ? a.w->state.get() : nullptr);
  if (!state) return;
  if (state->int8) {
    plan_int8_linear_cpu(a, *state->int8);
    return;
  }
  if (state->quant) {
    plan_quant_linear_cpu(a, *state->quant);
    return;
  }
  if (state->impl == CpuLinearImpl::Packed) return;  // no per-shape state
  if (state->impl == CpuLinearImpl::Amx) {
    gemm::amx_gemm_plan(a.x.size(0), state->amx);  // the scratch, allocated and faulted in now
    return;
  }
  if (!state->depth.empty()) {
    run_depth_slices(a, state->depth, true);  // also allocates (faults in) the partial sum
    return;
  }
  for (const MatmulPart& part : state->matmul)
    part.matmul->plan(state->matmul.size() == 1 ? a : part_args(a, part));
}

std::string linear_cpu_kernel_for(const LinearArgs& a) {
  auto* state = static_cast<CpuLinearState*>(a.w ? a.w->state.get() : nullptr);
  FLUXRT_CHECK(state != nullptr, ErrorCode::InvalidArgument, "[linear] weight was not prepared by the CPU backend");
  if (state->quant) return state->quant->onednn() ? "onednn-dequant-chunks" : "packed-avx2-dequant";
  if (state->int8) return "onednn-int8:" + int8_linear_impl(*state->int8);
  if (state->impl == CpuLinearImpl::Amx) return "amx-bf16";
  if (state->impl == CpuLinearImpl::Packed) return "packed-avx2";
  if (!state->depth.empty()) {
    const Tensor sum = Tensor::empty({a.x.size(0), a.w->out_features()}, DType::F32);
    std::string impl;
    for (size_t i = 0; i < state->depth.size(); ++i) {
      Partial partial = Partial::None;
      const LinearArgs s = slice_args(a, state->depth, i, sum, &partial);
      add_kernel(impl, "onednn:" + state->depth[i].matmul->impl_for(s, partial));
    }
    return impl;
  }
  std::string impl;
  for (const MatmulPart& part : state->matmul)
    add_kernel(impl, "onednn:" + part.matmul->impl_for(state->matmul.size() == 1 ? a : part_args(a, part)));
  return impl;
}

std::string describe_linear_cpu(const PreparedLinear& prepared) {
  const auto* state = static_cast<const CpuLinearState*>(prepared.state.get());
  if (!state) return "unprepared";
  if (state->quant) return describe_quant_linear_cpu(*state->quant);
  if (state->int8) return describe_int8_linear_cpu(*state->int8);
  if (state->impl == CpuLinearImpl::Amx)
    return fmt::format("amx-bf16 (tile panels, {:.1f} MB)", state->amx.bytes() / 1e6);
  if (state->impl == CpuLinearImpl::Packed)
    return fmt::format("packed-avx2 ({} panels, {:.1f} MB)", dtype_name(state->packed.dtype),
                       state->packed.bytes() / 1e6);
  const bool sliced = !state->depth.empty();
  const std::vector<MatmulPart>& parts = sliced ? state->depth : state->matmul;
  const std::string split = sliced ? fmt::format(", {} slices of K {}", parts.size(), parts[0].size)
                            : parts.size() > 1
                                ? fmt::format(", {} column groups of {}", parts.size(), parts[0].size)
                                : "";
  return fmt::format("onednn matmul {} ({}, {:.1f} MB{})", dtype_name(parts[0].matmul->compute_dtype()),
                     parts[0].matmul->impl_name(), weight_bytes(parts) / 1e6, split);
}

}  // namespace fluxrt::backend
