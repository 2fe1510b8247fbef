// VAE decoder convolutions (FLUX.1/FLUX.2 AE, flux-reference.md section 4.1) through the CPU
// conv2d kernel at 512x512 and 1024x1024 output: every distinct conv shape once, its count per
// decode, GFLOP/s, ratios to the GEMM and register peaks (the best of a reading before the
// convolutions and one after them), and the split between the layout reorders
// (NCHW <-> oneDNN blocked) and the convolution itself. The last line estimates the decoder's
// total convolution time (sum of count x min time).
//
//   bench_conv [--threads N] [--size 512|1024|all] [--dtype f32|bf16] [--runs R] [--only NAME]
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/conv_cpu.h"
#include "cli/bench/bench_common.h"
#include "core/threads.h"
#include "ops/conv.h"

using namespace fluxrt;

namespace {

struct ConvShape {
  const char* name;
  int64_t cin, cout, k;
  int scale_div;  // input spatial size = output size / scale_div (before any upsample)
  bool upsample;
  int count;      // occurrences per decode
};

// FLUX.2 AE decoder (z = 32): conv_in, mid (2 resnets), up levels 3, 2, 1, 0 (3 resnets each) with
// Upsample convs after levels 3, 2, 1, conv_out. Shortcut 1x1 convs where channels change.
constexpr ConvShape kDecoder[] = {
    {"conv_in 32->512 @/8", 32, 512, 3, 8, false, 1},
    {"res 512 @/8", 512, 512, 3, 8, false, 10},
    {"up 512 /8->/4", 512, 512, 3, 8, true, 1},
    {"res 512 @/4", 512, 512, 3, 4, false, 6},
    {"up 512 /4->/2", 512, 512, 3, 4, true, 1},
    {"res 512->256 @/2", 512, 256, 3, 2, false, 1},
    {"skip 1x1 512->256 @/2", 512, 256, 1, 2, false, 1},
    {"res 256 @/2", 256, 256, 3, 2, false, 5},
    {"up 256 /2->/1", 256, 256, 3, 2, true, 1},
    {"res 256->128 @/1", 256, 128, 3, 1, false, 1},
    {"skip 1x1 256->128 @/1", 256, 128, 1, 1, false, 1},
    {"res 128 @/1", 128, 128, 3, 1, false, 5},
    {"conv_out 128->3 @/1", 128, 3, 3, 1, false, 1},
};

Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (auto& e : v) e = dist(rng);
  return Tensor::from_vector(v, shape, dtype);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, runs = 2;
  std::string size = "all", dtype_arg = "f32", only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--size")) size = argv[i + 1];
    if (!std::strcmp(argv[i], "--dtype")) dtype_arg = argv[i + 1];
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];  // convs whose name contains this
  }
  set_num_threads(threads);
  const DType dtype = dtype_arg == "bf16" ? DType::BF16 : DType::F32;
  std::printf("%s\n", bench::machine_line().c_str());
  bench::PeakReadings peaks(true);
  peaks.take("before the convolutions");

  // Each conv's cells up to its GFLOP/s, and its rates: the ratio cells are made once the last
  // peak reading is in.
  struct Row {
    std::vector<std::string> cells;
    double gflops, gflops_per_cpu_s;
    std::string impl;
  };
  struct SizeResult {
    int64_t out;
    std::vector<Row> rows;
    double total_s = 0, total_flops = 0, total_cpu_s = 0;
  };
  std::vector<SizeResult> results;
  std::vector<int64_t> sizes;
  if (size == "all" || size == "512") sizes.push_back(512);
  if (size == "all" || size == "1024") sizes.push_back(1024);
  for (int64_t out : sizes) {
    SizeResult& result = results.emplace_back();
    result.out = out;
    for (const ConvShape& s : kDecoder) {
      if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
      const int64_t hin = out / s.scale_div;
      const int64_t hout = s.upsample ? 2 * hin : hin;
      const Tensor w = random_tensor({s.cout, s.cin, s.k, s.k}, dtype, 1, 0.02f);
      const Tensor b = random_tensor({s.cout}, dtype, 2, 0.1f);
      const Tensor x = random_tensor({1, s.cin, hin, hin}, dtype, 3, 1.0f);
      auto p = ops::prepare_conv2d(w, b);
      const ops::Conv2dOptions opt =
          s.upsample ? ops::Conv2dOptions::upsample_then_same(3) : ops::Conv2dOptions::same(static_cast<int>(s.k));
      Tensor y = Tensor::empty(ops::conv2d_output_shape(x, *p, opt), dtype);
      backend::Conv2dPhaseTimes phases_min{1e30, 1e30, 1e30};
      const bench::Timing t = bench::time_runs(
          [&] {
            ops::conv2d_into(x, *p, opt, y);
            const auto ph = backend::last_conv2d_cpu_phases();
            phases_min.reorder_in = std::min(phases_min.reorder_in, ph.reorder_in);
            phases_min.conv = std::min(phases_min.conv, ph.conv);
            phases_min.reorder_out = std::min(phases_min.reorder_out, ph.reorder_out);
          },
          1, runs, 30.0);
      const double flops = 2.0 * s.cout * s.cin * s.k * s.k * hout * hout;
      result.total_s += t.min_s * s.count;
      result.total_cpu_s += t.min_cpu_s * s.count;
      result.total_flops += flops * s.count;
      result.rows.push_back({{s.name, fmt::format("[1,{},{},{}]", s.cin, hin, hin), std::to_string(s.count),
                              fmt::format("{:.1f}", t.min_s * 1e3), fmt::format("{:.1f}", t.median_s * 1e3),
                              fmt::format("{:.0f}/{:.0f}/{:.0f}", phases_min.reorder_in * 1e3,
                                          phases_min.conv * 1e3, phases_min.reorder_out * 1e3)},
                             flops / t.min_s / 1e9,
                             flops / t.min_cpu_s / 1e9,
                             backend::describe_conv2d_cpu(*p)});
    }
  }
  peaks.take("after the convolutions");
  const double peak = peaks.gemm_best(), peak_per_core = peaks.gemm_best_per_core();
  const double registers = peaks.register_best();
  auto percent = [](double v, double of) {
    return of > 0 ? fmt::format("{:.0f}%", 100.0 * v / of) : std::string("-");
  };
  std::printf("%s\n", peaks.gemm_summary().c_str());
  if (registers > 0) std::printf("%s\n", peaks.register_summary().c_str());
  for (SizeResult& result : results) {
    // "/cpu-s": flops per CPU-second of the process, robust to other jobs on the machine.
    bench::Table table({"conv", "input", "count", "min ms", "median ms", "reorder in/conv/out ms", "GFLOP/s",
                        "% peak", "GFLOP/cpu-s", "% peak/cpu-s", "% regs", "impl"});
    for (Row& row : result.rows) {
      row.cells.insert(row.cells.end(), {fmt::format("{:.1f}", row.gflops), percent(row.gflops, peak),
                                         fmt::format("{:.1f}", row.gflops_per_cpu_s),
                                         percent(row.gflops_per_cpu_s, peak_per_core),
                                         percent(row.gflops, registers), row.impl});
      table.add(std::move(row.cells));
    }
    std::printf("\nVAE decoder convolutions, %lldx%lld output, %s:\n", static_cast<long long>(result.out),
                static_cast<long long>(result.out), dtype_name(dtype).data());
    table.print();
    const double rate = result.total_flops / result.total_s / 1e9;
    const double rate_cpu = result.total_flops / result.total_cpu_s / 1e9;
    std::printf(
        "decoder conv total: %.2f TFLOP in %.1f s = %.1f GFLOP/s (%s of peak); %.1f GFLOP/cpu-s (%s)\n",
        result.total_flops / 1e12, result.total_s, rate, percent(rate, peak).c_str(), rate_cpu,
        percent(rate_cpu, peak_per_core).c_str());
  }
  return 0;
}
