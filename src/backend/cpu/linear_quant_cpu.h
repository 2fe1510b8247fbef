#pragma once
// CPU linear on quantized weights (GGUF blocks, fp8): the weight stays in its bytes, so the
// resident model is the file's size. The packed GEMM dequantizes each Kc x 16 weight panel (with
// the Highway dequantization and 8x8 transposes) into an L1 buffer when a task reaches it and runs
// its micro-kernel and fused epilogue as for bf16 weights: dequantization is O(N*K) per Mc rows of
// x (96), against the GEMM's O(M*N*K), and no f32 copy of the weight is made.
#include <cstddef>
#include <memory>
#include <string>

#include "backend/args/linear.h"
#include "core/quant.h"

namespace fluxrt::backend {

struct QuantLinearCpu {
  QuantizedMatrix q;
  std::shared_ptr<float> bias;  // [N rounded up to 16] f32, or null
};

// Null when this CPU cannot run the packed GEMM (no AVX2): the caller then widens the weight.
std::shared_ptr<QuantLinearCpu> prepare_quant_linear_cpu(const QuantizedMatrix& q, const Tensor& bias);
void quant_linear_cpu(const LinearArgs& args, const QuantLinearCpu& w);
std::string describe_quant_linear_cpu(const QuantLinearCpu& w);

}  // namespace fluxrt::backend
