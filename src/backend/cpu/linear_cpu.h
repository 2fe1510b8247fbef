#pragma once
// CPU linear: y = epilogue(x @ W^T), weights prepared once per model.
//
// Implementations, chosen per weight at prepare time (DESIGN.md section 2, issue 3):
//  - Amx: our bf16 GEMM on the AMX tile unit (gemm_amx.h), weights packed once into tile panels
//    of the same size. Used for bf16 weights where the CPU has AMX-BF16 and the OS grants the
//    tile state: with weights streaming from memory it runs klein's layers 1.2-1.8x faster than
//    oneDNN 2.6's brgemm (docs/cpu.md, "The AMX GEMM").
//  - OneDnn: oneDNN matmul with the weights reordered once into oneDNN's preferred blocked layout
//    (format_tag::any); bias, GELU-tanh/SiLU and the gated residual fused as post-ops. Used for
//    bf16 weights where the CPU has native bf16 but no AMX (avx512_core_bf16: Zen4, Cooper Lake),
//    and for f32 weights.
//  - Packed: our AVX2/FMA GEMM (gemm_packed.h) on bf16 weights packed once into panels of the same
//    size, widened to f32 in registers. Used for bf16 (and f16) weights on CPUs without native bf16,
//    where oneDNN 2.6 has no bf16 matmul and its f32 matmul would double the weight memory.
//  - W8A8 (linear_int8_cpu.h): int8 weights and per-token int8 activations on oneDNN's int8
//    matmul, for CPUs with int8 matrix units. Never chosen by Auto: a model asks for it per weight
//    (LinearFormat::Int8, the prepare_linear_int8 slots below: precision int8), or
//    FLUXRT_LINEAR_IMPL=w8a8 turns it on for every linear of the process; either way for dense
//    weights and for Q8_0 / fp8 ones (the 2-6 bit types keep their path).
// FLUXRT_LINEAR_IMPL=amx|onednn|packed|w8a8 overrides the choice (benchmarks and tests compare them).
#include <memory>
#include <string>

#include "backend/args/linear.h"

namespace fluxrt::backend {

enum class CpuLinearImpl { Auto, OneDnn, Packed, W8A8, Amx };

std::shared_ptr<PreparedLinear> prepare_linear_cpu(const Tensor& weight, const Tensor& bias);
std::shared_ptr<PreparedLinear> prepare_linear_cpu_with(const Tensor& weight, const Tensor& bias,
                                                        CpuLinearImpl impl);
// A quantized weight kept in its bytes (linear_quant_cpu.h); on CPUs without AVX2 it is widened
// to bf16 and prepared as above.
std::shared_ptr<PreparedLinear> prepare_linear_quantized_cpu(const QuantizedMatrix& weight,
                                                             const Tensor& bias);
// LinearFormat::Int8 (the kernel table's int8 slots): W8A8 whatever FLUXRT_LINEAR_IMPL says. Where
// oneDNN has no JIT int8 matmul for a shape the weight keeps the usual path, with a warning once
// per shape (an error under FLUXRT_STRICT_KERNELS=1); a quantized weight of fewer than 8 bits
// stays in its bytes as prepare_linear_quantized_cpu keeps it.
std::shared_ptr<PreparedLinear> prepare_linear_int8_cpu(const Tensor& weight, const Tensor& bias);
std::shared_ptr<PreparedLinear> prepare_linear_quantized_int8_cpu(const QuantizedMatrix& weight,
                                                                  const Tensor& bias);
void linear_cpu(const LinearArgs& args);
// The one-time work linear_cpu would do for a call like `args`, without computing: the oneDNN
// primitives (and a weight layout of their own, if they want one) and their scratch, for dense,
// split and W8A8 weights. The planning kernel table's linear slot.
void plan_linear_cpu(const LinearArgs& args);
// The kernel linear_cpu would run for `args` (shapes, strides, dtypes, epilogue; the data is not
// read): "amx-bf16", "packed-avx2", or "onednn:" + oneDNN's impl_info_str for the call's primitive, e.g.
// "onednn:brg:avx2" ("... + gate outside" when the gated residual is applied after the matmul).
// A name starting with "onednn:ref" means oneDNN's reference kernel (~1000x slower).
std::string linear_cpu_kernel_for(const LinearArgs& args);

// What a prepared weight runs on, e.g. "packed-avx2 (bf16 panels, 18.9 MB)" or
// "onednn matmul bf16 (brg:avx512_core_bf16)". For logs and benchmark tables.
std::string describe_linear_cpu(const PreparedLinear& prepared);

// Whether oneDNN does bf16 natively on this CPU (decides the default above), and its ISA name.
bool cpu_native_bf16();
const char* cpu_isa_name();

}  // namespace fluxrt::backend
