// The benchmarks' peak readings (apps/cli/bench/bench_common.h, PeakReadings): best, worst,
// labels and the summary lines, from readings injected in place of the machine's, so the figures
// are exact; and that a disabled set (--skip-peak) reads nothing.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/bench/bench_common.h"

namespace fluxrt::bench {
namespace {

PeakReading reading(double gemm, double gemm_per_core, double registers, double registers_per_core) {
  PeakReading r;
  r.gemm_gflops = gemm;
  r.gemm_gflops_per_core = gemm_per_core;
  r.gemm_source = "oneDNN bf16 matmul 2048^3";
  r.registers.gflops = registers;
  r.registers.gflops_per_core = registers_per_core;
  r.registers.threads = 2;
  r.registers.unit = registers > 0 ? "AMX TDPBF16PS" : "none";
  return r;
}

// A reader that hands out `script` in order.
PeakReadings::Reader scripted(std::vector<PeakReading> script) {
  auto next = std::make_shared<size_t>(0);
  return [script, next] { return script.at((*next)++); };
}

TEST(PeakReadings, BestWorstAndSpreadOfInjectedReadings) {
  // The AMX machine's swing from the issue: 463 in one reading, 1515 in another.
  PeakReadings peaks(scripted({reading(463.0, 400.0, 5000.0, 2600.0), reading(1515.0, 780.0, 6000.0, 3000.0),
                               reading(1200.0, 800.0, 5500.0, 2900.0)}));
  EXPECT_TRUE(peaks.enabled());
  EXPECT_EQ(peaks.count(), 0);
  EXPECT_EQ(peaks.gemm_best(), 0.0);
  EXPECT_EQ(peaks.gemm_summary(), "");
  peaks.take("before load");
  peaks.take("after load");
  peaks.take("after the run");
  EXPECT_EQ(peaks.count(), 3);
  EXPECT_EQ(peaks.gemm_best(), 1515.0);
  EXPECT_EQ(peaks.gemm_worst(), 463.0);
  EXPECT_EQ(peaks.gemm_best_per_core(), 800.0);  // each figure's own best, as each is a best-of
  EXPECT_EQ(peaks.register_best(), 6000.0);
  EXPECT_EQ(peaks.register_worst(), 5000.0);
  EXPECT_EQ(peaks.register_best_per_core(), 3000.0);
  EXPECT_EQ(peaks.gemm_source(), "oneDNN bf16 matmul 2048^3");
  EXPECT_EQ(peaks.register_unit(), "AMX TDPBF16PS");
  EXPECT_EQ(peaks.when_taken(), "before load/after load/after the run");
  EXPECT_EQ(
      peaks.gemm_summary(),
      "GEMM peak 1515.0 GFLOP/s, 800.0 per CPU-second, best of 3 readings [463.0..1515.0], taken before "
      "load/after load/after the run (oneDNN bf16 matmul 2048^3)");
  EXPECT_EQ(peaks.register_summary(),
            "register peak 6000.0 GFLOP/s, 3000.0 per CPU-second, best of 3 readings [5000.0..6000.0] "
            "(AMX TDPBF16PS, 2 threads)");
}

TEST(PeakReadings, OneReadingIsSingular) {
  PeakReadings peaks(scripted({reading(100.0, 50.0, 190.0, 95.0)}));
  peaks.take("before the layers");
  EXPECT_EQ(
      peaks.gemm_summary(),
      "GEMM peak 100.0 GFLOP/s, 50.0 per CPU-second, best of 1 reading [100.0..100.0], taken before the "
      "layers (oneDNN bf16 matmul 2048^3)");
}

TEST(PeakReadings, ReadingLineNamesSourcesOnlyFirst) {
  const PeakReading r = reading(142.0, 71.0, 190.0, 95.0);
  EXPECT_EQ(
      PeakReadings::reading_line(1, "before load", r, true),
      "peak reading 1 (before load): GEMM 142.0 GFLOP/s, 71.0 per CPU-second (oneDNN bf16 matmul 2048^3); "
      "registers 190.0 GFLOP/s, 95.0 per CPU-second (AMX TDPBF16PS, 2 threads)");
  EXPECT_EQ(
      PeakReadings::reading_line(2, "after load", r, false),
      "peak reading 2 (after load): GEMM 142.0 GFLOP/s, 71.0 per CPU-second; registers 190.0 GFLOP/s, 95.0 "
      "per CPU-second");
  // A CPU without a probe says so once, and has no register summary.
  const PeakReading bare = reading(10.0, 5.0, 0.0, 0.0);
  EXPECT_NE(
      PeakReadings::reading_line(1, "before load", bare, true).find("no register probe for this CPU (none)"),
      std::string::npos);
  PeakReadings peaks(scripted({bare}));
  peaks.take("before load");
  EXPECT_EQ(peaks.register_best(), 0.0);
  EXPECT_EQ(peaks.register_summary(), "");
}

TEST(PeakReadings, DisabledReadsNothing) {
  PeakReadings peaks(false);
  EXPECT_FALSE(peaks.enabled());
  peaks.take("before load");  // would take seconds if it measured
  EXPECT_EQ(peaks.count(), 0);
  EXPECT_EQ(peaks.gemm_best(), 0.0);
  EXPECT_EQ(peaks.register_best(), 0.0);
  EXPECT_EQ(peaks.gemm_summary(), "");
  EXPECT_EQ(peaks.when_taken(), "");
}

}  // namespace
}  // namespace fluxrt::bench
