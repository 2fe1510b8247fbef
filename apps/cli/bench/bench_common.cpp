#include "bench_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "backend/cpu_bench.h"
#include "core/threads.h"

namespace fluxrt::bench {
namespace {

// Square matmul with weights in oneDNN's preferred layout (what a prepared linear layer gets).
double matmul_gflops(int size, bool bf16, double* per_core) {
  const std::function<void()> run = backend::cpu::make_gemm_peak_matmul(size, bf16);
  if (!run) return 0.0;  // no implementation for this type on this CPU
  const Timing t = time_runs(run, 1, 5, 10.0);
  const double flops = 2.0 * size * double(size) * size;
  if (per_core) *per_core = flops / t.min_cpu_s / 1e9;
  return flops / t.min_s / 1e9;
}

}  // namespace

double measure_bf16_gemm_peak_gflops(int size, double* per_core) {
  return matmul_gflops(size, true, per_core);
}
double measure_f32_gemm_peak_gflops(int size, double* per_core) {
  return matmul_gflops(size, false, per_core);
}

GemmPeak measure_gemm_peak(int size) {
  GemmPeak p;
  double bf16_core = 0, f32_core = 0;
  p.bf16_gflops = measure_bf16_gemm_peak_gflops(size, &bf16_core);
  p.f32_gflops = measure_f32_gemm_peak_gflops(size, &f32_core);
  p.gflops_per_core = p.bf16_gflops > 0 ? bf16_core : f32_core;
  if (p.bf16_gflops > 0) {
    p.gflops = p.bf16_gflops;
    p.source = fmt::format("oneDNN bf16 matmul {}^3", size);
  } else {
    p.gflops = p.f32_gflops;
    p.source =
        fmt::format("oneDNN f32 matmul {}^3 (no bf16 matmul on {})", size, backend::cpu::gemm_isa_name());
  }
  return p;
}

Timing time_runs(const std::function<void()>& fn, int warmup, int runs, double max_seconds) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  double total = 0, min_cpu = 1e300;
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  };
  const double cpu_start = cpu_now();
  for (int i = 0; i < runs; ++i) {
    const double c0 = cpu_now();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    min_cpu = std::min(min_cpu, cpu_now() - c0);
    times.push_back(s);
    total += s;
    if (total > max_seconds && times.size() >= 2) break;
  }
  const double cpu_total = cpu_now() - cpu_start;
  std::sort(times.begin(), times.end());
  Timing t;
  t.runs = static_cast<int>(times.size());
  t.min_s = times.front();
  t.median_s = times[times.size() / 2];
  t.min_cpu_s = min_cpu;
  t.mean_cpu_s = cpu_total / static_cast<double>(times.size());
  return t;
}

void Table::print() const {
  std::vector<size_t> width(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  widen(header_);
  for (const auto& r : rows_) widen(r);
  auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      if (i) s += "  ";
      s += i == 0 ? fmt::format("{:<{}}", row[i], width[i]) : fmt::format("{:>{}}", row[i], width[i]);
    }
    std::puts(s.c_str());
  };
  line(header_);
  for (const auto& r : rows_) line(r);
  std::fflush(stdout);
}

std::string machine_line() {
  std::string model = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string l; std::getline(cpuinfo, l);) {
    if (l.rfind("model name", 0) == 0) {
      model = l.substr(l.find(':') + 2);
      break;
    }
  }
  return fmt::format("{} | {} threads | oneDNN ISA {}", model, num_threads(), backend::cpu::gemm_isa_name());
}

}  // namespace fluxrt::bench
