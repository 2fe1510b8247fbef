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

PeakReading read_peaks(int gemm_size, double gemm_seconds) {
  PeakReading reading;
  // Only the reference type: the bf16 matmul where oneDNN has one, else the f32 one.
  bool bf16 = true;
  std::function<void()> run = backend::cpu::make_gemm_peak_matmul(gemm_size, bf16);
  if (!run) {
    bf16 = false;
    run = backend::cpu::make_gemm_peak_matmul(gemm_size, bf16);
  }
  if (run) {
    // Many runs within the time: a short one that a neighbour left alone is what the best keeps.
    const Timing t = time_runs(run, 1, 1000, gemm_seconds);
    const double flops = 2.0 * gemm_size * double(gemm_size) * gemm_size;
    reading.gemm_gflops = flops / t.min_s / 1e9;
    reading.gemm_gflops_per_core = flops / t.min_cpu_s / 1e9;
    reading.gemm_source = bf16 ? fmt::format("oneDNN bf16 matmul {}^3", gemm_size)
                               : fmt::format("oneDNN f32 matmul {}^3, no bf16 matmul on {}", gemm_size,
                                             backend::cpu::gemm_isa_name());
  }
  reading.registers = backend::cpu::measure_register_peak();
  return reading;
}

void PeakReadings::take(const char* when) {
  if (!reader_) return;
  readings_.emplace_back(when, reader_());
  std::puts(reading_line(count(), when, readings_.back().second, count() == 1).c_str());
  std::fflush(stdout);
}

namespace {

template <typename Field>
double extreme(const std::vector<std::pair<std::string, PeakReading>>& readings, Field field, bool highest) {
  double v = 0;
  for (size_t i = 0; i < readings.size(); ++i) {
    const double x = field(readings[i].second);
    v = i == 0 ? x : highest ? std::max(v, x) : std::min(v, x);
  }
  return v;
}

}  // namespace

double PeakReadings::gemm_best() const {
  return extreme(
      readings_, [](const PeakReading& r) { return r.gemm_gflops; }, true);
}
double PeakReadings::gemm_worst() const {
  return extreme(
      readings_, [](const PeakReading& r) { return r.gemm_gflops; }, false);
}
double PeakReadings::gemm_best_per_core() const {
  return extreme(
      readings_, [](const PeakReading& r) { return r.gemm_gflops_per_core; }, true);
}
double PeakReadings::register_best() const {
  return extreme(
      readings_, [](const PeakReading& r) { return r.registers.gflops; }, true);
}
double PeakReadings::register_worst() const {
  return extreme(
      readings_, [](const PeakReading& r) { return r.registers.gflops; }, false);
}
double PeakReadings::register_best_per_core() const {
  return extreme(
      readings_, [](const PeakReading& r) { return r.registers.gflops_per_core; }, true);
}

const std::string& PeakReadings::gemm_source() const {
  static const std::string none;
  return readings_.empty() ? none : readings_.front().second.gemm_source;
}
const std::string& PeakReadings::register_unit() const {
  static const std::string none;
  return readings_.empty() ? none : readings_.front().second.registers.unit;
}

std::string PeakReadings::when_taken() const {
  std::string out;
  for (const auto& [when, reading] : readings_) out += (out.empty() ? "" : "/") + when;
  return out;
}

std::string PeakReadings::gemm_summary() const {
  if (readings_.empty()) return "";
  return fmt::format(
      "GEMM peak {:.1f} GFLOP/s, {:.1f} per CPU-second, best of {} reading{} [{:.1f}..{:.1f}], taken {} ({})",
      gemm_best(), gemm_best_per_core(), count(), count() == 1 ? "" : "s", gemm_worst(), gemm_best(),
      when_taken(), gemm_source());
}

std::string PeakReadings::register_summary() const {
  if (readings_.empty() || register_best() <= 0) return "";
  return fmt::format(
      "register peak {:.1f} GFLOP/s, {:.1f} per CPU-second, best of {} reading{} [{:.1f}..{:.1f}] ({}, {} "
      "threads)",
      register_best(), register_best_per_core(), count(), count() == 1 ? "" : "s", register_worst(),
      register_best(), register_unit(), readings_.front().second.registers.threads);
}

std::string PeakReadings::reading_line(int index, const char* when, const PeakReading& r, bool first) {
  std::string line = fmt::format("peak reading {} ({}): GEMM {:.1f} GFLOP/s, {:.1f} per CPU-second", index,
                                 when, r.gemm_gflops, r.gemm_gflops_per_core);
  if (first) line += fmt::format(" ({})", r.gemm_source);
  if (r.registers.gflops > 0) {
    line += fmt::format("; registers {:.1f} GFLOP/s, {:.1f} per CPU-second", r.registers.gflops,
                        r.registers.gflops_per_core);
    if (first) line += fmt::format(" ({}, {} threads)", r.registers.unit, r.registers.threads);
  } else if (first) {
    line += fmt::format("; no register probe for this CPU ({})", r.registers.unit);
  }
  return line;
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
