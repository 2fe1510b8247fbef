// The register-throughput probe (backend/cpu_bench.h): how fast the CPU's multiply unit runs when
// nothing waits on memory, measured in the benchmark's own run. A GEMM reaches only part of it
// (loads, packing, the edges of blocks), and on a shared machine both move together with the
// neighbours' load, so the ratio to it says how much of the hardware a kernel actually used.
//
// Each unit's loop is compiled for its ISA through a target attribute, as gemm_amx.cpp compiles
// the tile instructions, so this file builds on any x86-64 and a loop runs only where
// detect_cpu_units() found its unit.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "backend/cpu/amx_tile_config.h"
#include "backend/cpu/gemm_amx.h"
#include "backend/cpu_bench.h"
#include "core/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define FLUXRT_PROBE_X86 1
#endif

namespace fluxrt::backend::cpu {
namespace {

// Independent accumulators per thread. An FMA or VDPBF16PS has 4-6 cycles of latency and up to
// two issue ports, so 8-12 chains must be in flight to keep both ports busy; 12 plus the two
// operands still fit AVX2's 16 ymm registers, so nothing spills to memory.
constexpr int kVectorAccumulators = 12;
// AMX: C tiles 0-5 accumulate A tile 6 times B tile 7. TDPBF16PS issues every 16 cycles but takes
// about three times that to finish, so at least four chains must overlap; six leave a margin.
constexpr int kAmxAccumulators = 6;

#ifdef FLUXRT_PROBE_X86

// acc = acc * m + a converges to a / (1 - m) for |m| < 1: the values stay finite and normal
// however long the loop runs (infinities or denormals would slow some CPUs down). The operands
// come in as arguments and the sum goes out, so the compiler can neither fold nor drop the loop.
__attribute__((target("avx2,fma"))) float avx2_fma_loop(int64_t iterations, float m_value, float a_value) {
  __m256 acc[kVectorAccumulators];
  for (int i = 0; i < kVectorAccumulators; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(m_value), a = _mm256_set1_ps(a_value);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kVectorAccumulators; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  __m256 sum = acc[0];
  for (int i = 1; i < kVectorAccumulators; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float lane : lanes) total += lane;
  return total;
}

// x's bf16 pairs are (v, -v) and y's (w, w): each pair's two products cancel, so the
// accumulators keep their starting values however long the loop runs.
__attribute__((target("avx512f,avx512bf16"))) float avx512_bf16_loop(int64_t iterations, float v, float w) {
  __m512 acc[kVectorAccumulators];
  for (int i = 0; i < kVectorAccumulators; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 alternating = _mm512_set_ps(-v, v, -v, v, -v, v, -v, v, -v, v, -v, v, -v, v, -v, v);
  const __m512bh x = _mm512_cvtne2ps_pbh(alternating, alternating);
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(w), _mm512_set1_ps(w));
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kVectorAccumulators; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  __m512 sum = acc[0];
  for (int i = 1; i < kVectorAccumulators; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float lane : lanes) total += lane;
  return total;
}

// `a` and `b` are 16 rows x 64 bytes of bf16 each, loaded once; the loop then runs on the tiles.
__attribute__((target("amx-tile,amx-bf16"))) float amx_loop(int64_t iterations, const uint16_t* a,
                                                            const uint16_t* b) {
  AmxTileConfig config = full_amx_tiles();  // the AMX GEMM's configuration
  // GCC's tile intrinsics name none of the memory they read or write: the barriers make the
  // compiler finish the stores before the instructions read them, and read `c` only after.
  __asm__ volatile("" : : "r"(&config), "r"(a), "r"(b) : "memory");
  _tile_loadconfig(&config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_loadd(6, a, 64);
  _tile_loadd(7, b, 64);
  for (int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 6, 7);
    _tile_dpbf16ps(1, 6, 7);
    _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7);
    _tile_dpbf16ps(4, 6, 7);
    _tile_dpbf16ps(5, 6, 7);
  }
  alignas(64) float c[kAmxAccumulators][256];
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
  _tile_stored(4, c[4], 64);
  _tile_stored(5, c[5], 64);
  _tile_release();
  __asm__ volatile("" : : "r"(&c[0][0]) : "memory");
  float total = 0;
  for (const auto& tile : c)
    for (float v : tile) total += v;
  return total;
}
#endif  // FLUXRT_PROBE_X86

// Instructions one loop iteration issues.
int instructions_per_iteration(RegisterUnit unit) {
  return unit == RegisterUnit::AmxBf16 ? kAmxAccumulators : kVectorAccumulators;
}

// One thread's loop of `iterations` on `unit`; the result only keeps the work observable.
float run_loop(RegisterUnit unit, int64_t iterations) {
#ifdef FLUXRT_PROBE_X86
  switch (unit) {
    case RegisterUnit::Avx2Fma:
      return avx2_fma_loop(iterations, 0.5f, 1.0f);
    case RegisterUnit::Avx512Bf16:
      return avx512_bf16_loop(iterations, 0.5f, 0.25f);
    case RegisterUnit::AmxBf16: {
      // A's rows are (v, -v) pairs and B's (w, w), so C stays zero (see avx512_bf16_loop).
      alignas(64) uint16_t a[512], b[512];
      for (int i = 0; i < 512; ++i) {
        a[i] = i % 2 == 0 ? 0x3F00 : 0xBF00;  // bf16 0.5, -0.5
        b[i] = 0x3E80;                        // bf16 0.25
      }
      return amx_loop(iterations, a, b);
    }
    case RegisterUnit::None:
      break;
  }
#else
  (void)unit;
  (void)iterations;
#endif
  return 0;
}

bool unit_available(RegisterUnit unit, const CpuUnits& cpu) {
  switch (unit) {
    case RegisterUnit::AmxBf16:
      return cpu.amx_bf16;
    case RegisterUnit::Avx512Bf16:
      return cpu.avx512_bf16;
    case RegisterUnit::Avx2Fma:
      return cpu.avx2_fma;
    case RegisterUnit::None:
      break;
  }
  return false;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Iterations one thread runs in about `seconds`: doubled from a small count until a single-thread
// loop takes 10 ms (long enough to time, short beside the runs), then scaled.
int64_t calibrate_iterations(RegisterUnit unit, double seconds, float* sink) {
  int64_t n = 1024;
  for (;;) {
    const auto start = std::chrono::steady_clock::now();
    *sink += run_loop(unit, n);
    const double s = seconds_since(start);
    if (s >= 0.01 || n >= (int64_t{1} << 40))
      return std::max<int64_t>(1, static_cast<int64_t>(n * seconds / s));
    n *= 2;
  }
}

}  // namespace

CpuUnits detect_cpu_units() {
  CpuUnits units;
#ifdef FLUXRT_PROBE_X86
  // libgcc's checks include the OS's saving of the ymm / zmm state (XCR0).
  units.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  units.avx512_bf16 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  units.amx_bf16 = gemm::amx_gemm_supported();  // also asks Linux for the tile state
#endif
  return units;
}

RegisterUnit select_register_unit(const CpuUnits& units) {
  if (units.amx_bf16) return RegisterUnit::AmxBf16;
  if (units.avx512_bf16) return RegisterUnit::Avx512Bf16;
  if (units.avx2_fma) return RegisterUnit::Avx2Fma;
  return RegisterUnit::None;
}

const char* register_unit_name(RegisterUnit unit) {
  switch (unit) {
    case RegisterUnit::AmxBf16:
      return "AMX TDPBF16PS";
    case RegisterUnit::Avx512Bf16:
      return "AVX512_BF16 VDPBF16PS";
    case RegisterUnit::Avx2Fma:
      return "AVX2 FMA f32";
    case RegisterUnit::None:
      break;
  }
  return "none";
}

double register_unit_flops_per_instruction(RegisterUnit unit) {
  switch (unit) {
    case RegisterUnit::AmxBf16:
      return 2.0 * 16 * 16 * 32;  // 16 x 16 outputs, each a 32-long dot product
    case RegisterUnit::Avx512Bf16:
      return 16 * 2 * 2;  // 16 f32 lanes, each two bf16 products added in
    case RegisterUnit::Avx2Fma:
      return 8 * 2;  // 8 f32 lanes, a multiply and an add each
    case RegisterUnit::None:
      break;
  }
  return 0;
}

RegisterPeak measure_register_peak(RegisterUnit unit, double seconds_per_run, int runs) {
  RegisterPeak peak;
  peak.unit = register_unit_name(unit);
  if (unit == RegisterUnit::None || !unit_available(unit, detect_cpu_units())) return peak;
  float sink = 0;
  const int64_t iterations = calibrate_iterations(unit, seconds_per_run, &sink);
  const double flops_per_thread = static_cast<double>(iterations) * instructions_per_iteration(unit) *
                                  register_unit_flops_per_instruction(unit);
  const int threads = num_threads();
  std::vector<float> sinks(static_cast<size_t>(threads), 0.0f);
  std::vector<double> cpu_seconds(static_cast<size_t>(threads), 0.0);
  for (int r = 0; r < std::max(1, runs); ++r) {
    int team = 0;
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
#pragma omp single
      team = omp_get_num_threads();
      const double c0 = thread_cpu_seconds();
      sinks[static_cast<size_t>(t)] += run_loop(unit, iterations);
      cpu_seconds[static_cast<size_t>(t)] = thread_cpu_seconds() - c0;
    }
    const double wall = seconds_since(start);
    double busy = 0;
    for (int t = 0; t < team; ++t) busy += cpu_seconds[static_cast<size_t>(t)];
    const double flops = flops_per_thread * team;
    peak.gflops = std::max(peak.gflops, flops / wall / 1e9);
    if (busy > 0) peak.gflops_per_core = std::max(peak.gflops_per_core, flops / busy / 1e9);
    peak.threads = team;
  }
  for (float s : sinks) sink += s;
  // A volatile store the compiler must make, so the loops' results are needed (per thread: two
  // callers at once must not race on it).
  static thread_local volatile float observed;
  observed = sink;
  (void)observed;
  return peak;
}

RegisterPeak measure_register_peak(double seconds_per_run, int runs) {
  return measure_register_peak(select_register_unit(detect_cpu_units()), seconds_per_run, runs);
}

}  // namespace fluxrt::backend::cpu
