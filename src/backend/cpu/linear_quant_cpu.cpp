#include "backend/cpu/linear_quant_cpu.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "backend/cpu/dequant_cpu.h"
#include "backend/cpu/gemm_packed.h"
#include "core/error.h"
#include "core/threads.h"

namespace fluxrt::backend {
namespace {

// The packed GEMM's block sizes (gemm_packed.cpp): a task is kMc rows x kNc columns of y.
constexpr int64_t kMc = 96;
constexpr int64_t kNc = 512;

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

float* aligned_floats(size_t n) {
  void* p = std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  if (!p) fail(ErrorCode::OutOfMemory, "[linear] cannot allocate {} bytes of dequantization scratch", n * 4);
  return static_cast<float*>(p);
}

// The calling thread's scratch, grown as needed and kept for its next call (a model's linears
// run one after another on one thread).
float* scratch_floats(size_t n) {
  thread_local std::unique_ptr<float, AlignedFree> buffer;
  thread_local size_t size = 0;
  if (n > size) {
    buffer.reset(aligned_floats(n));
    size = n;
  }
  return buffer.get();
}

// Output rows [n0, n0 + count) of W as f32 panels: panel p holds rows n0 + 16p .. + 16 as
// out[p][k][16] (rows past `count` are zero), the packed GEMM's f32 weight layout.
void dequantize_panels(const QuantizedMatrix& q, int64_t n0, int64_t count, float* out) {
  const int64_t k = q.cols, panels = (count + gemm::kNr - 1) / gemm::kNr;
#pragma omp parallel
  {
    std::vector<float> rows(static_cast<size_t>(gemm::kNr * k));
#pragma omp for schedule(static)
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t r0 = p * gemm::kNr, nr = std::min(gemm::kNr, count - r0);
      cpu::dequantize_rows_cpu(q, n0 + r0, nr, rows.data(), k);
      std::fill(rows.begin() + nr * k, rows.end(), 0.0f);
      float* panel = out + p * k * gemm::kNr;
      for (int64_t kk = 0; kk < k; ++kk)
        for (int64_t j = 0; j < gemm::kNr; ++j) panel[kk * gemm::kNr + j] = rows[j * k + kk];
    }
  }
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
  const QuantizedMatrix& q = w.q;
  const int64_t m = a.x.size(0), n = q.rows, k = q.cols;
  // Enough column blocks per group that every thread has a task even when M is one block, but
  // no more than the scratch allows.
  const int64_t m_blocks = (m + kMc - 1) / kMc;
  const int64_t wanted = kNc * std::max<int64_t>(1, (num_threads() + m_blocks - 1) / m_blocks);
  const int64_t affordable =
      std::max<int64_t>(kNc, static_cast<int64_t>(kQuantScratchBytes / (sizeof(float) * k)) / kNc * kNc);
  const int64_t group = std::min({wanted, affordable, (n + gemm::kNr - 1) / gemm::kNr * gemm::kNr});
  float* scratch = scratch_floats(static_cast<size_t>(group * k));
  for (int64_t n0 = 0; n0 < n; n0 += group) {
    const int64_t g = std::min(group, n - n0);
    dequantize_panels(q, n0, g, scratch);
    gemm::PackedWeights view;
    view.dtype = DType::F32;
    view.n = g;
    view.k = k;
    view.panels = (g + gemm::kNr - 1) / gemm::kNr;
    view.data = scratch;
    if (w.bias) view.bias = std::shared_ptr<float>(w.bias, w.bias.get() + n0);
    const Tensor y = a.y.narrow(1, n0, g);
    const Tensor residual = a.residual.defined() ? a.residual.narrow(1, n0, g) : Tensor();
    const Tensor gate = a.gate.defined() ? a.gate.narrow(0, n0, g) : Tensor();
    gemm::packed_gemm(a.x, view, a.activation, residual, gate, y);
  }
}

std::string describe_quant_linear_cpu(const QuantLinearCpu& w) {
  return fmt::format("packed-avx2 on {} ({:.1f} MB, dequantized per call)", quant_name(w.q.type),
                     w.q.nbytes() / 1e6);
}

}  // namespace fluxrt::backend
