#include "backend/cpu/linear_quant_cpu.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cpu/gemm_packed.h"
#include "core/error.h"
#include "core/threads.h"

namespace fluxrt::backend {
namespace {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

float* aligned_floats(size_t n) {
  void* p = std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  if (!p) fail(ErrorCode::OutOfMemory, "[linear] cannot allocate {} bytes for a bias", n * 4);
  return static_cast<float*>(p);
}

}  // namespace

std::shared_ptr<QuantLinearCpu> prepare_quant_linear_cpu(const QuantizedMatrix& q, const Tensor& bias) {
  if (!gemm::packed_gemm_supported()) return nullptr;
  auto w = std::make_shared<QuantLinearCpu>();
  w->q = q;
  if (bias.defined()) {
    const int64_t n_pad = (q.rows + gemm::kNr - 1) / gemm::kNr * gemm::kNr;
    w->bias = std::shared_ptr<float>(aligned_floats(static_cast<size_t>(n_pad)), AlignedFree{});
    std::fill(w->bias.get(), w->bias.get() + n_pad, 0.0f);
    const Tensor b = bias.contiguous();
    convert(b.raw_data(), b.dtype(), w->bias.get(), DType::F32, static_cast<size_t>(q.rows));
  }
  return w;
}

void quant_linear_cpu(const LinearArgs& a, const QuantLinearCpu& w) {
  gemm::PackedWeights view;
  view.dtype = DType::F32;
  view.n = w.q.rows;
  view.k = w.q.cols;
  view.panels = (w.q.rows + gemm::kNr - 1) / gemm::kNr;
  view.quantized = &w.q;  // each Kc x 16 panel dequantized where the GEMM uses it
  view.bias = w.bias;
  gemm::packed_gemm(a.x, view, a.activation, a.residual, a.gate, a.y);
}

std::string describe_quant_linear_cpu(const QuantLinearCpu& w) {
  return fmt::format("packed-avx2 on {} ({:.1f} MB, dequantized per panel)", quant_name(w.q.type),
                     w.q.nbytes() / 1e6);
}

}  // namespace fluxrt::backend
