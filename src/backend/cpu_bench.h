#pragma once
// The part of the CPU backend that benchmarks use (bench/, `fluxrt bench`): the GEMM whose
// achieved rate is the peak every benchmark reports against, and the ISA oneDNN runs on. Upper
// layers include this instead of the backend's oneDNN internals (backend/cpu/onednn_util.h).
#include <functional>

namespace fluxrt::backend::cpu {

// A square size^3 oneDNN matmul, bf16 x bf16 -> f32 (`bf16`) or f32 x f32 -> f32, zero inputs,
// weights in oneDNN's preferred layout (what a prepared linear layer gets), on the current thread
// count. Each call of the result runs it once and waits. Empty when oneDNN has no implementation
// of that type on this CPU (oneDNN 2.6 has no bf16 matmul below avx512_core).
std::function<void()> make_gemm_peak_matmul(int size, bool bf16);

// oneDNN's effective ISA: "avx2", "avx512_core_bf16", ...
const char* gemm_isa_name();

}  // namespace fluxrt::backend::cpu
