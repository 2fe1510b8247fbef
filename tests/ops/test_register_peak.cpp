// The register-throughput probe (backend/cpu_bench.h): the unit chosen from CPU flags, for CPUs
// this one is not as well (the choice is a pure function of the flags); the flops each unit's
// instruction is counted as; and that the probe runs here, names the unit it ran and gives a
// positive rate. Rates are printed, never asserted against a figure: the machine may be shared.
#include <gtest/gtest.h>

#include <cstdio>

#include "backend/cpu_bench.h"
#include "core/threads.h"

namespace fluxrt::backend::cpu {
namespace {

CpuUnits units(bool amx, bool avx512_bf16, bool avx2_fma) {
  CpuUnits u;
  u.amx_bf16 = amx;
  u.avx512_bf16 = avx512_bf16;
  u.avx2_fma = avx2_fma;
  return u;
}

TEST(RegisterPeak, SelectsTheWidestUnitTheFlagsAllow) {
  // A Sapphire Rapids Xeon has all three; a Zen 4 or Cooper Lake AVX512_BF16 and AVX2; this
  // project's shared EPYC AVX2 only.
  EXPECT_EQ(select_register_unit(units(true, true, true)), RegisterUnit::AmxBf16);
  EXPECT_EQ(select_register_unit(units(false, true, true)), RegisterUnit::Avx512Bf16);
  EXPECT_EQ(select_register_unit(units(false, false, true)), RegisterUnit::Avx2Fma);
  EXPECT_EQ(select_register_unit(units(false, false, false)), RegisterUnit::None);
  // Each flag alone is enough for its unit.
  EXPECT_EQ(select_register_unit(units(true, false, false)), RegisterUnit::AmxBf16);
  EXPECT_EQ(select_register_unit(units(false, true, false)), RegisterUnit::Avx512Bf16);
}

TEST(RegisterPeak, NamesAndFlopsPerInstruction) {
  EXPECT_STREQ(register_unit_name(RegisterUnit::AmxBf16), "AMX TDPBF16PS");
  EXPECT_STREQ(register_unit_name(RegisterUnit::Avx512Bf16), "AVX512_BF16 VDPBF16PS");
  EXPECT_STREQ(register_unit_name(RegisterUnit::Avx2Fma), "AVX2 FMA f32");
  EXPECT_STREQ(register_unit_name(RegisterUnit::None), "none");
  // TDPBF16PS: 16 x 16 f32 outputs, each 32 bf16 products added in (a multiply and an add each).
  EXPECT_EQ(register_unit_flops_per_instruction(RegisterUnit::AmxBf16), 16384.0);
  // VDPBF16PS zmm: 16 f32 lanes, each two bf16 products added in.
  EXPECT_EQ(register_unit_flops_per_instruction(RegisterUnit::Avx512Bf16), 64.0);
  // VFMADD ymm: 8 f32 lanes.
  EXPECT_EQ(register_unit_flops_per_instruction(RegisterUnit::Avx2Fma), 16.0);
  EXPECT_EQ(register_unit_flops_per_instruction(RegisterUnit::None), 0.0);
}

TEST(RegisterPeak, ProbeRunsOnThisCpu) {
  const CpuUnits cpu = detect_cpu_units();
  const RegisterUnit unit = select_register_unit(cpu);
  const RegisterPeak peak = measure_register_peak(0.02, 2);  // short: the figure is not under test
  std::printf("register peak: %s, %.1f GFLOP/s, %.1f per CPU-second, %d threads\n", peak.unit.c_str(),
              peak.gflops, peak.gflops_per_core, peak.threads);
  EXPECT_EQ(peak.unit, register_unit_name(unit));
  // The machine the project is developed on (an AVX2 EPYC) must name the AVX2 unit.
  if (cpu.avx2_fma && !cpu.avx512_bf16 && !cpu.amx_bf16) {
    EXPECT_EQ(peak.unit, "AVX2 FMA f32");
  }
  if (unit == RegisterUnit::None) GTEST_SKIP() << "no probe for this CPU";
  EXPECT_GT(peak.gflops, 0.0);
  EXPECT_GT(peak.gflops_per_core, 0.0);
  EXPECT_EQ(peak.threads, num_threads());
}

TEST(RegisterPeak, EveryUnitThisCpuHasRunsAndOthersAreRefused) {
  const CpuUnits cpu = detect_cpu_units();
  const struct {
    RegisterUnit unit;
    bool available;
  } cases[] = {{RegisterUnit::AmxBf16, cpu.amx_bf16},
               {RegisterUnit::Avx512Bf16, cpu.avx512_bf16},
               {RegisterUnit::Avx2Fma, cpu.avx2_fma},
               {RegisterUnit::None, false}};
  for (const auto& c : cases) {
    const RegisterPeak peak = measure_register_peak(c.unit, 0.01, 1);
    EXPECT_EQ(peak.unit, register_unit_name(c.unit));
    if (c.available) {
      EXPECT_GT(peak.gflops, 0.0) << peak.unit;
    } else {
      // Never executed: its instructions would fault on this CPU.
      EXPECT_EQ(peak.gflops, 0.0) << peak.unit;
      EXPECT_EQ(peak.threads, 0) << peak.unit;
    }
  }
}

}  // namespace
}  // namespace fluxrt::backend::cpu
