// `fluxrt bench text-encoder`: the FLUX.2-klein Qwen3 text encoder (layers 0..26, taps 9/18/27)
// on synthetic weights of the real shapes (Qwen3-4B for klein-4B, Qwen3-8B for klein-9B; random,
// never zeros; no files needed). Times the encode of one prompt padded to 512 tokens and one padded
// to 256 (the two usual max_sequence_length values), with a realistic mask (40 real tokens), and
// prints ms, GFLOP/s (projections + causal attention), its ratio to the GEMM peak measured in the
// same run, and the peak RSS.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/allocator.h"
#include "core/error.h"
#include "core/threads.h"
#include "models/qwen3/qwen3_encoder.h"
#include "runtime/bench.h"

#if __has_include("runtime/bench_common.h")
#include "runtime/bench_common.h"
#define FLUXRT_TE_HAVE_BENCH_COMMON 1
#else
#define FLUXRT_TE_HAVE_BENCH_COMMON 0
#endif

namespace fluxrt::runtime {
namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double gib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

struct RunTiming {
  double min_s = 0, median_s = 0, min_cpu_s = 0;
  int runs = 0;
};

// One warm-up, then up to `runs` timed runs within ~max_seconds (at least 2).
RunTiming time_encoder(const std::function<void()>& fn, int runs, double max_seconds) {
  fn();
  std::vector<double> wall, cpu;
  const double start = wall_seconds();
  for (int i = 0; i < runs; ++i) {
    const double w0 = wall_seconds(), c0 = cpu_seconds();
    fn();
    wall.push_back(wall_seconds() - w0);
    cpu.push_back(cpu_seconds() - c0);
    if (i >= 1 && wall_seconds() - start > max_seconds) break;
  }
  RunTiming t;
  t.runs = static_cast<int>(wall.size());
  t.min_cpu_s = *std::min_element(cpu.begin(), cpu.end());
  std::sort(wall.begin(), wall.end());
  t.min_s = wall.front();
  t.median_s = wall[wall.size() / 2];
  return t;
}

}  // namespace

int bench_text_encoder(const BenchRequest& request) {
  models::Qwen3Config config;
  std::string te_name;
  if (request.variant == "flux.2-klein-4b") {
    config = models::Qwen3Config::qwen3_4b();
    te_name = "Qwen3-4B";
  } else if (request.variant == "flux.2-klein-9b") {
    config = models::Qwen3Config::qwen3_8b();
    te_name = "Qwen3-8B";
  } else {
    fail(ErrorCode::InvalidArgument,
         "bench text-encoder: variant {} has no Qwen3 text encoder (flux.2-klein-4b or flux.2-klein-9b)",
         request.variant);
  }
  if (!request.device.is_cpu()) fail(ErrorCode::Unsupported, "bench text-encoder: only the CPU device for now");
  models::Qwen3EncoderOptions options;
  options.dtype = request.dtype;
  options.device = request.device;

#if FLUXRT_TE_HAVE_BENCH_COMMON
  std::printf("%s\n", bench::machine_line().c_str());
#endif
  std::printf("text encoder %s for %s: %lld of %lld layers (taps 9/18/27), %s, batch %d, %d threads\n",
              te_name.c_str(), request.variant.c_str(), static_cast<long long>(options.taps.back()),
              static_cast<long long>(config.num_layers), std::string(dtype_name(options.dtype)).c_str(),
              request.batch, num_threads());
  std::fflush(stdout);

  const double t0 = wall_seconds();
  models::Qwen3Encoder encoder = models::Qwen3Encoder::synthetic(config, options);
  std::printf("synthetic weights: %.2f GiB in %.1f s\n", gib(encoder.weight_bytes()), wall_seconds() - t0);
  std::fflush(stdout);

  double peak = 0, peak_per_core = 0;
  std::string peak_source = "not measured";
#if FLUXRT_TE_HAVE_BENCH_COMMON
  if (!request.skip_peak) {
    bench::GemmPeak p = bench::measure_gemm_peak();
    peak = p.gflops;
    peak_per_core = p.gflops_per_core;
    peak_source = p.source;
  }
#endif
  std::printf("GEMM peak: %.1f GFLOP/s wall, %.1f GFLOP/s per CPU-second (%s)\n", peak, peak_per_core,
              peak_source.c_str());
  std::fflush(stdout);

  std::vector<int> lengths = {512, 256};
  if (request.max_sequence_length != 512 && request.max_sequence_length != 256)
    lengths.push_back(request.max_sequence_length);
  std::string json_rows;
  std::printf("%-8s %5s %10s %10s %8s %9s %7s %12s %10s\n", "length", "runs", "min ms", "median ms", "GFLOP",
              "GFLOP/s", "%peak", "GFLOP/cpu-s", "%peak/cpu");
  for (int length : lengths) {
    const int64_t B = request.batch, L = length, real = std::min<int64_t>(40, L);
    Tensor ids = Tensor::empty({B, L}, DType::I32);   // [B, L]
    Tensor mask = Tensor::empty({B, L}, DType::I32);  // [B, L]
    for (int64_t i = 0; i < B * L; ++i) {
      const int64_t pos = i % L;
      ids.data<int32_t>()[i] = pos < real ? static_cast<int32_t>((pos * 7919) % 151643) : 151643;
      mask.data<int32_t>()[i] = pos < real ? 1 : 0;
    }
    RunTiming t = time_encoder([&] { (void)encoder.forward(ids, mask); }, 5, 60.0);
    const double gflop = encoder.flops(B, L) * 1e-9;
    const double rate = gflop / t.min_s;
    const double rate_cpu = gflop / t.min_cpu_s;
    std::string ratio = peak > 0 ? fmt::format("{:.1f}", 100.0 * rate / peak) : "-";
    std::string ratio_cpu = peak_per_core > 0 ? fmt::format("{:.1f}", 100.0 * rate_cpu / peak_per_core) : "-";
    std::printf("%-8d %5d %10.1f %10.1f %8.1f %9.1f %7s %12.1f %10s\n", length, t.runs, t.min_s * 1e3,
                t.median_s * 1e3, gflop, rate, ratio.c_str(), rate_cpu, ratio_cpu.c_str());
    std::fflush(stdout);
    json_rows += fmt::format("{}{{\"length\": {}, \"batch\": {}, \"min_s\": {:.6f}, \"median_s\": {:.6f}, "
                             "\"gflop\": {:.3f}, \"gflops\": {:.2f}, \"gflops_per_cpu_s\": {:.2f}, \"peak_gflops\": {:.2f}, "
                             "\"peak_gflops_per_cpu_s\": {:.2f}}}",
                             json_rows.empty() ? "" : ", ", length, B, t.min_s, t.median_s, gflop, rate, rate_cpu, peak,
                             peak_per_core);
  }
  std::printf("GFLOP/cpu-s: flops per busy CPU-second, compared with the peak's own per-CPU-second rate (robust on a\n"
              "shared machine, where wall-clock rates mostly measure the neighbours).\n");
  std::printf("peak RSS: %.2f GiB\n", gib(process_peak_rss_bytes()));
  if (!request.json_path.empty()) {
    std::ofstream out(request.json_path);
    if (!out) fail(ErrorCode::Io, "bench text-encoder: cannot write {}", request.json_path);
    out << fmt::format("{{\"component\": \"text-encoder\", \"variant\": \"{}\", \"rows\": [{}]}}\n", request.variant,
                       json_rows);
  }
  return 0;
}

}  // namespace fluxrt::runtime
