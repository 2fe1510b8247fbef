#pragma once
// The part of the CPU backend that benchmarks use (bench/, `fluxrt bench`): the GEMM whose
// achieved rate is the peak every benchmark reports against, the ISA oneDNN runs on, and the
// register-throughput probe (the multiply unit's own ceiling, which the GEMM peak is not: on AVX2
// oneDNN 2.6 has no bf16 matmul, so its f32 peak is one the model's bf16 kernels can beat). Upper
// layers include this instead of the backend's internals (backend/cpu/onednn_util.h, gemm_amx.h).
#include <functional>
#include <string>

namespace fluxrt::backend::cpu {

// A square size^3 oneDNN matmul, bf16 x bf16 -> f32 (`bf16`) or f32 x f32 -> f32, zero inputs,
// weights in oneDNN's preferred layout (what a prepared linear layer gets), on the current thread
// count. Each call of the result runs it once and waits. Empty when oneDNN has no implementation
// of that type on this CPU (oneDNN 2.6 has no bf16 matmul below avx512_core).
std::function<void()> make_gemm_peak_matmul(int size, bool bf16);

// oneDNN's effective ISA: "avx2", "avx512_core_bf16", ...
const char* gemm_isa_name();

// The multiply units the register probe knows, best first in the order select_register_unit
// prefers them.
enum class RegisterUnit {
  None,        // none of the below (or not x86-64): no probe
  AmxBf16,     // AMX TDPBF16PS: C[16x16] f32 += A[16x32] bf16 . B[32x16] bf16, 2*16*16*32 flops
  Avx512Bf16,  // AVX512_BF16 VDPBF16PS on zmm: 16 f32 lanes x 2 bf16 pairs x 2 = 64 flops
  Avx2Fma,     // AVX2 VFMADD on ymm, f32: 8 lanes x 2 = 16 flops
};

// What the CPU (and OS) offer, as plain flags, so that the choice is a pure function testable for
// CPUs other than the one running the tests.
struct CpuUnits {
  bool amx_bf16 = false;  // AMX-TILE and AMX-BF16, tile state enabled and granted to the process
  bool avx512_bf16 = false;
  bool avx2_fma = false;
};
// This CPU's flags (asks Linux for the AMX tile state, as the AMX GEMM does).
CpuUnits detect_cpu_units();
// The widest unit the flags allow: AMX, then AVX512_BF16, then AVX2 FMA, else None. The same
// probe code runs whichever is chosen, as the linear layers choose the AMX GEMM at run time.
RegisterUnit select_register_unit(const CpuUnits& units);
// "AMX TDPBF16PS", "AVX512_BF16 VDPBF16PS", "AVX2 FMA f32" or "none".
const char* register_unit_name(RegisterUnit unit);
// Flops one instruction of the unit does (multiply and add counted apart); 0 for None.
double register_unit_flops_per_instruction(RegisterUnit unit);

struct RegisterPeak {
  double gflops = 0;           // all threads, wall clock, best run; 0 when nothing was measured
  double gflops_per_core = 0;  // flops per busy thread CPU-second, best run (robust to neighbours)
  int threads = 0;             // the team that ran
  std::string unit;            // register_unit_name of the unit measured
};
// The physical ceiling of the CPU's multiply unit: every thread (the current thread count,
// OpenMP) runs independent multiply-accumulates on register-resident operands, flops counted
// exactly from the instruction count; the best of `runs` runs of about `seconds_per_run` each.
// Runs `unit` (measure_register_peak(seconds, runs) picks the selected one); zeros and the unit's
// name when this CPU lacks it.
RegisterPeak measure_register_peak(RegisterUnit unit, double seconds_per_run, int runs);
// Many short runs rather than a few long ones: on a shared machine the best is the run that found
// every core free, and short runs find such moments more often.
RegisterPeak measure_register_peak(double seconds_per_run = 0.05, int runs = 8);

}  // namespace fluxrt::backend::cpu
