#pragma once
// CPU linear on quantized weights (GGUF blocks, fp8): the weight stays in its bytes, so the
// resident model is the file's size. Each call dequantizes the weight one group of output rows at
// a time, with the Highway dequantization, into f32 panels of the packed GEMM's layout (a scratch
// of at most kQuantScratchBytes) and runs the packed GEMM's micro-kernel and epilogue on that
// group's columns of y. Dequantization is O(N*K) per call against the GEMM's O(M*N*K).
#include <cstddef>
#include <memory>
#include <string>

#include "backend/args/linear.h"
#include "core/quant.h"

namespace fluxrt::backend {

inline constexpr size_t kQuantScratchBytes = size_t{64} << 20;

struct QuantLinearCpu {
  QuantizedMatrix q;
  std::shared_ptr<float> bias;  // [N rounded up to 16] f32, or null
};

// Null when this CPU cannot run the packed GEMM (no AVX2): the caller then widens the weight.
std::shared_ptr<QuantLinearCpu> prepare_quant_linear_cpu(const QuantizedMatrix& q, const Tensor& bias);
void quant_linear_cpu(const LinearArgs& args, const QuantLinearCpu& w);
std::string describe_quant_linear_cpu(const QuantLinearCpu& w);

}  // namespace fluxrt::backend
