#pragma once
// Shared benchmark helpers (bench/ and `fluxrt bench`): the machine's GEMM peak measured in the same run
// (every benchmark prints its ratio to it, DESIGN.md section 5), robust timing (min and median of N runs),
// and a small fixed-width table printer.
#include <functional>
#include <string>
#include <vector>

namespace fluxrt::bench {

// Achieved GFLOP/s of oneDNN bf16 x bf16 -> f32 matmul on size^3 (best of a few runs, current
// thread count). Returns 0 when oneDNN has no bf16 matmul on this CPU (oneDNN 2.6 below
// avx512_core, e.g. AVX2-only machines).
double measure_bf16_gemm_peak_gflops(int size = 4096, double* per_core = nullptr);
// The same with f32 x f32 -> f32.
double measure_f32_gemm_peak_gflops(int size = 4096, double* per_core = nullptr);

// The reference peak for ratios: the bf16 figure where oneDNN has bf16 matmul, else the f32 one.
struct GemmPeak {
  double gflops = 0;
  double gflops_per_core = 0;  // the same run's flops per CPU-second (see Timing::min_cpu_s)
  double bf16_gflops = 0;      // 0 when unavailable
  double f32_gflops = 0;
  std::string source;  // e.g. "oneDNN f32 matmul 4096^3 (no bf16 matmul on avx2)"
};
GemmPeak measure_gemm_peak(int size = 4096);

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
