#pragma once
// Shared benchmark helpers (bench/ and `fluxrt bench`): the machine's GEMM peak and register peak
// read through the same run (every benchmark prints its ratios to them; docs/cpu.md, "The peaks the
// benchmarks report against"), robust timing (min and median of N runs), and a small fixed-width
// table printer.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu_bench.h"

namespace fluxrt::bench {

// One short reading (about 1-2 s) of both peaks: the reference GEMM (bf16 where oneDNN has it,
// else f32) on size^3 for at most `gemm_seconds` of timed runs, then the register probe. 2048^3
// rather than the 4096^3 of one long reading: on two AVX2 cores one 4096^3 run alone takes over
// a second, and several short runs give the best a better chance of a quiet moment.
struct PeakReading {
  double gemm_gflops = 0;           // wall, best run
  double gemm_gflops_per_core = 0;  // per process CPU-second, best run
  std::string gemm_source;          // e.g. "oneDNN f32 matmul 2048^3, no bf16 matmul on avx2"
  backend::cpu::RegisterPeak registers;
};
PeakReading read_peaks(int gemm_size = 2048, double gemm_seconds = 1.0);

// The peaks of a benchmark, read several times through its run (before and after loading, between
// warm-up and timed run, at the end) instead of once at its start: on a machine shared with other
// jobs one reading can be a third of the next, so ratios to it swing past 100%. The benchmark's
// ratios use the best reading, and the spread says how busy the machine was.
class PeakReadings {
 public:
  using Reader = std::function<PeakReading()>;
  // Takes readings with read_peaks() when `enabled`; otherwise (--skip-peak) take() does nothing
  // and every figure stays 0.
  explicit PeakReadings(bool enabled) : PeakReadings(enabled ? Reader(read_peaks_default) : Reader()) {}
  // Takes readings with `reader` (the tests inject figures this way).
  explicit PeakReadings(Reader reader) : reader_(std::move(reader)) {}

  bool enabled() const { return static_cast<bool>(reader_); }
  // Takes one reading now, labelled `when` ("before load", "after the run"), and prints a line
  // with it (the first one names the GEMM and the register unit). Nothing when not enabled.
  void take(const char* when);

  int count() const { return static_cast<int>(readings_.size()); }
  // Best (highest) and worst of the readings; 0 without readings.
  double gemm_best() const;
  double gemm_worst() const;
  double gemm_best_per_core() const;
  double register_best() const;
  double register_worst() const;
  double register_best_per_core() const;
  const std::string& gemm_source() const;
  const std::string& register_unit() const;
  // The labels in order: "before load/after load/after the run".
  std::string when_taken() const;
  // "GEMM peak 1515.0 GFLOP/s, 760.1 per CPU-second, best of 4 readings [463.0..1515.0], taken
  // before load/after load/.../after the run (oneDNN bf16 matmul 2048^3)"; "" without readings.
  std::string gemm_summary() const;
  // "register peak 6000.0 GFLOP/s, 3000.0 per CPU-second, best of 4 readings [5800.0..6000.0]
  // (AMX TDPBF16PS, 2 threads)"; "" without readings or without a probe for this CPU.
  std::string register_summary() const;
  // The reading line take() prints.
  static std::string reading_line(int index, const char* when, const PeakReading& reading, bool first);

 private:
  static PeakReading read_peaks_default() { return read_peaks(); }
  Reader reader_;
  std::vector<std::pair<std::string, PeakReading>> readings_;
};

struct Timing {
  double min_s = 0;
  double median_s = 0;
  // Least process CPU time (all threads) of a run. On a machine shared with other jobs the wall
  // time mostly measures the neighbours; flops / min_cpu_s is the rate per busy core, which stays
  // comparable between runs (OpenMP spin-waits count as busy, so it is a lower bound).
  double min_cpu_s = 0;
  // Process CPU time of all timed runs over their count. For runs of a few milliseconds the
  // per-run figure above undercounts: the kernel adds a thread's time running on another core to
  // the process clock at scheduler ticks (~4 ms), so a short run often sees only the calling
  // thread's share; over runs that add up to many ticks this evens out (not for sub-tick totals).
  double mean_cpu_s = 0;
  int runs = 0;
};
// Runs fn `warmup` times untimed, then `runs` times; stops early once `max_seconds` of timed
// runs have passed (at least 2 timed runs).
Timing time_runs(const std::function<void()>& fn, int warmup = 1, int runs = 5, double max_seconds = 20.0);

// Columns are right-aligned except the first; print() writes to stdout.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// One line naming the CPU, thread count and oneDNN ISA, for the top of every benchmark.
std::string machine_line();

}  // namespace fluxrt::bench
