#include "backend/cpu/linear_quant_cpu.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "backend/cpu/dequant_cpu.h"
#include "backend/cpu/gemm_packed.h"
#include "backend/cpu/onednn_matmul.h"
#include "backend/cpu/onednn_util.h"
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

std::shared_ptr<QuantLinearCpu> prepare_quant_linear_cpu(const QuantizedMatrix& q, const Tensor& bias,
                                                         bool onednn) {
  auto w = std::make_shared<QuantLinearCpu>();
  w->q = q;
  if (onednn) {
    // Descriptors only here; each primitive is made on its first call shape.
    auto chunks = [&](DType compute) {
      OneDnnChunks c;
      const int64_t rows = std::min(kOneDnnChunkRows, q.rows);
      c.chunk = onednn::MatmulLinear::with_weights_per_call(rows, q.cols, bias.defined(), compute);
      if (q.rows > rows && q.rows % rows != 0)
        c.tail = onednn::MatmulLinear::with_weights_per_call(q.rows % rows, q.cols, bias.defined(), compute);
      return c;
    };
    try {
      w->f32 = chunks(DType::F32);
      if (onednn::native_bf16()) w->bf16 = chunks(DType::BF16);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Unsupported) throw;
      w->f32 = w->bf16 = OneDnnChunks();  // no JIT kernel for plain weights: the packed GEMM, where it runs
    }
  }
  if (!w->onednn() && !gemm::packed_gemm_supported()) return nullptr;
  if (bias.defined()) {
    const int64_t n_pad = (q.rows + gemm::kNr - 1) / gemm::kNr * gemm::kNr;
    w->bias = std::shared_ptr<float>(aligned_floats(static_cast<size_t>(n_pad)), AlignedFree{});
    std::fill(w->bias.get(), w->bias.get() + n_pad, 0.0f);
    const Tensor b = bias.contiguous();
    convert(b.raw_data(), b.dtype(), w->bias.get(), DType::F32, static_cast<size_t>(q.rows));
  }
  return w;
}

namespace {

// The oneDNN path: rows [n0, n0 + c) of W dequantized (Highway) into a buffer in the compute
// dtype, then x @ those rows^T into y's columns [n0, n0 + c), with the bias, gate and residual
// slices. bf16 compute differs from f32 only in the extra rounding of the rows and in which
// MatmulLinear runs, so the f32 run here (AVX2) checks the rest of it.
void onednn_quant_linear(const LinearArgs& a, const QuantLinearCpu& w) {
  const QuantizedMatrix& q = w.q;
  const bool bf16_compute = a.x.dtype() != DType::F32 && w.bf16.chunk;
  const OneDnnChunks& mm = bf16_compute ? w.bf16 : w.f32;
  const DType compute = bf16_compute ? DType::BF16 : DType::F32;
  const int64_t k = q.cols, chunk = std::min(kOneDnnChunkRows, q.rows);
  thread_local std::vector<float> f32;
  thread_local std::vector<uint16_t> bf16;
  f32.resize(static_cast<size_t>(chunk * k));
  if (compute == DType::BF16) bf16.resize(static_cast<size_t>(chunk * k));
  // x in the compute dtype once, not once per chunk (MatmulLinear converts what it is given).
  LinearArgs part = a;
  if (part.x.dtype() != compute) part.x = a.x.to(compute);
  // The calling thread's buffers, taken as pointers: inside the parallel loop the names would
  // be each worker's own (empty) thread_local vectors.
  float* rows = f32.data();
  uint16_t* rows_bf16 = compute == DType::BF16 ? bf16.data() : nullptr;
  for (int64_t n0 = 0; n0 < q.rows; n0 += chunk) {
    const int64_t c = std::min(chunk, q.rows - n0);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < c; ++r) {
      cpu::dequantize_rows_cpu(q, n0 + r, 1, rows + r * k, k);
      if (rows_bf16)
        convert(rows + r * k, DType::F32, rows_bf16 + r * k, DType::BF16, static_cast<size_t>(k));
    }
    const LinearArgs cols = column_slice(part, n0, c);
    const void* weights = rows_bf16 ? static_cast<const void*>(rows_bf16) : rows;
    onednn::MatmulLinear& m = c == chunk ? *mm.chunk : *mm.tail;
    m.run_with(cols, weights, w.bias ? w.bias.get() + n0 : nullptr);
  }
}

}  // namespace

void plan_quant_linear_cpu(const LinearArgs& a, const QuantLinearCpu& w) {
  if (!w.onednn()) return;
  const QuantizedMatrix& q = w.q;
  const bool bf16_compute = a.x.dtype() != DType::F32 && w.bf16.chunk;
  const OneDnnChunks& mm = bf16_compute ? w.bf16 : w.f32;
  const int64_t chunk = std::min(kOneDnnChunkRows, q.rows);
  // The first chunk and the tail: the two call shapes onednn_quant_linear gives its matmuls.
  for (int64_t n0 : {int64_t{0}, q.rows - q.rows % chunk}) {
    const int64_t c = std::min(chunk, q.rows - n0);
    if (c <= 0) continue;
    (c == chunk ? *mm.chunk : *mm.tail).plan(column_slice(a, n0, c));
  }
}

void quant_linear_cpu(const LinearArgs& a, const QuantLinearCpu& w) {
  if (w.onednn()) {
    onednn_quant_linear(a, w);
    return;
  }
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
  if (w.onednn())
    return fmt::format("onednn matmul {} on {} ({:.1f} MB, {} rows dequantized per chunk)",
                       w.bf16.chunk ? "bf16 (f32 for f32 activations)" : "f32", quant_name(w.q.type),
                       w.q.nbytes() / 1e6, kOneDnnChunkRows);
  return fmt::format("packed-avx2 on {} ({:.1f} MB, dequantized per panel)", quant_name(w.q.type),
                     w.q.nbytes() / 1e6);
}

}  // namespace fluxrt::backend
