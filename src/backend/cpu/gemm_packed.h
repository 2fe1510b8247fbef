#pragma once
// A cache-blocked GEMM for CPUs without native bf16 (AVX2 + FMA): y = epilogue(x @ W^T).
//
// Why it exists: oneDNN 2.6 has no bf16 matmul below avx512_core, and its f32 matmul would need
// the weights widened to f32 (twice the checkpoint's memory: 15.5 GB for klein-4B). Here the
// weights stay bf16: prepare packs them once into 16-column panels ([N/16][K][16], bf16, same
// size as the checkpoint) and the micro-kernel widens them to f32 in registers (a bf16 is the top
// half of an f32, so widening is one shift or one mask). Activations are packed per call into
// f32 row panels, which costs O(M*K) against the O(M*N*K) arithmetic.
//
// Blocking (BLIS style, 6x16 f32 micro-tile in 12 ymm accumulators): a task owns an Mc x Nc block
// of the output; it walks K in Kc slices, packs the Mc x Kc activation slice (L2-resident) and
// runs the micro-kernel over the Nc/16 weight panels (a Kc x 16 bf16 panel is 8 KiB, L1-resident).
// Epilogue (bias, GELU-tanh/SiLU, gated residual, output rounding) runs on the block while it is
// still in L2.
#include <cstdint>
#include <memory>

#include "backend/args/linear.h"
#include "core/quant.h"
#include "core/tensor.h"

namespace fluxrt::backend::gemm {

inline constexpr int64_t kNr = 16;  // micro-tile columns (two ymm of f32)
inline constexpr int64_t kMr = 6;   // micro-tile rows

// True when this CPU runs the AVX2/FMA micro-kernels (checked once, at run time).
bool packed_gemm_supported();

// Weights packed once: panel p holds columns [16p, 16p+16) of W^T, K rows of 16 values; the last
// panel is zero-padded. bf16 panels interleave the two halves (word 2j = column j, word 2j+1 =
// column 8+j) so each half widens with one instruction; f32 panels are plain.
struct PackedWeights {
  DType dtype = DType::BF16;  // BF16 or F32
  int64_t n = 0, k = 0, panels = 0;
  std::shared_ptr<void> buffer;
  const void* data = nullptr;
  // Instead of packed panels: a weight kept in its quantized bytes (GGUF blocks, fp8). Each
  // Kc x 16 panel is dequantized when a task reaches it, into the L1 buffer bf16 panels widen
  // into, so no f32 copy of the weight is ever made (linear_quant_cpu.h).
  const QuantizedMatrix* quantized = nullptr;
  std::shared_ptr<float> bias;  // [N] f32 or null
  size_t bytes() const { return static_cast<size_t>(panels * k * kNr) * dtype_size(dtype); }
};

// Packs W [N, K] (bf16 stays bf16; f32 and f16 become f32 panels) and the optional bias [N].
PackedWeights pack_weights(const Tensor& weight, const Tensor& bias);

// y = epilogue(x @ W^T) for x [M, K] (stride(1) == 1; f32, bf16 or f16), y [M, N] (same dtypes).
// residual/gate as in LinearArgs (residual may alias y).
void packed_gemm(const Tensor& x, const PackedWeights& w, Activation act, const Tensor& residual,
                 const Tensor& gate, const Tensor& y);

}  // namespace fluxrt::backend::gemm
