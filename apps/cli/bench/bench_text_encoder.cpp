// `fluxrt bench text-encoder`: the FLUX.2-klein Qwen3 text encoder (layers 0..26, taps 9/18/27)
// on synthetic weights of the real shapes (Qwen3-4B for klein-4B, Qwen3-8B for klein-9B; random,
// never zeros; no files needed). Times the encode of one prompt padded to 512 tokens and one padded
// to 256 (the two usual max_sequence_length values), with a realistic mask (40 real tokens), and
// prints ms, GFLOP/s (projections + causal attention), its ratios to the GEMM and register peaks
// (the best of readings before the load, after it and after the runs), and the peak RSS.
// For flux.1-dev / flux.1-schnell the encoder is T5-XXL v1.1 (24 layers, 9.5 GB of bf16, no mask:
// every padded position is computed). When MemAvailable cannot hold all 24 layers, or when
// FLUXRT_BENCH_T5_LAYERS=N asks for fewer (a shared machine), N real-shape layers are timed and the
// full-model time is reported scaled by 24/N (all layers are identical in shape and work).
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_common.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/memory_info.h"
#include "core/threads.h"
#include "models/qwen3/qwen3_encoder.h"
#include "models/t5/t5_encoder.h"
#include "models/weight_binder.h"
#include "ops/dispatch.h"

namespace fluxrt::cli {
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

// One timed length, printed once the last peak reading is in (its ratios use the best reading).
struct LengthResult {
  int length = 0;
  RunTiming t;
  double gflop = 0;
  double full_model_s = 0;  // T5 with fewer layers timed: the time scaled to all of them
};

// Prints the table of `results` against the best peaks and returns its JSON rows. `layers_timed`
// > 0 (T5) adds the full-model column and fields.
std::string print_results(const std::vector<LengthResult>& results, const bench::PeakReadings& peaks,
                          int batch, int64_t layers_timed) {
  const double peak = peaks.gemm_best(), peak_per_core = peaks.gemm_best_per_core();
  const double registers = peaks.register_best();
  if (peaks.count() > 0) std::printf("%s\n", peaks.gemm_summary().c_str());
  if (registers > 0) std::printf("%s\n", peaks.register_summary().c_str());
  const bool t5 = layers_timed > 0;
  std::printf("%-8s %5s %10s %10s%s %8s %9s %7s %12s %10s %7s\n", "length", "runs", "min ms", "median ms",
              t5 ? fmt::format(" {:>12}", "full-model ms").c_str() : "", "GFLOP", "GFLOP/s", "%peak",
              "GFLOP/cpu-s", "%peak/cpu", "%regs");
  auto percent = [](double v, double of) {
    return of > 0 ? fmt::format("{:.1f}", 100.0 * v / of) : std::string("-");
  };
  std::string json_rows;
  for (const LengthResult& r : results) {
    const RunTiming& t = r.t;
    const double rate = r.gflop / t.min_s, rate_cpu = r.gflop / t.min_cpu_s;
    std::printf("%-8d %5d %10.1f %10.1f%s %8.1f %9.1f %7s %12.1f %10s %7s\n", r.length, t.runs, t.min_s * 1e3,
                t.median_s * 1e3, t5 ? fmt::format(" {:12.1f}", r.full_model_s * 1e3).c_str() : "", r.gflop,
                rate, percent(rate, peak).c_str(), rate_cpu, percent(rate_cpu, peak_per_core).c_str(),
                percent(rate, registers).c_str());
    json_rows += fmt::format(
        "{}{{\"length\": {}, \"batch\": {}, {}\"min_s\": {:.6f}, \"median_s\": {:.6f}, {}\"gflop\": {:.3f}, "
        "\"gflops\": {:.2f}, \"gflops_per_cpu_s\": {:.2f}, \"peak_gflops\": {:.2f}, "
        "\"peak_gflops_per_cpu_s\": {:.2f}, "
        "\"peak_readings\": {}, \"peak_min_gflops\": {:.2f}, \"register_peak_gflops\": {:.2f}}}",
        json_rows.empty() ? "" : ", ", r.length, batch,
        t5 ? fmt::format("\"layers_timed\": {}, ", layers_timed) : std::string(), t.min_s, t.median_s,
        t5 ? fmt::format("\"full_model_s\": {:.6f}, ", r.full_model_s) : std::string(), r.gflop, rate,
        rate_cpu, peak, peak_per_core, peaks.count(), peaks.gemm_worst(), registers);
  }
  std::fflush(stdout);
  return json_rows;
}

int bench_t5_encoder(const BenchRequest& request) {
  models::T5Config config = models::T5Config::t5_v1_1_xxl();
  const int64_t full_layers = config.num_layers;
  const int64_t D = config.d_model, inner = config.num_heads * config.d_kv, F = config.d_ff;
  const size_t wbytes = request.dtype == DType::F32 ? 4 : 2;
  const size_t layer_bytes = static_cast<size_t>(4 * D * inner + 3 * D * F) * wbytes;
  const size_t fixed_bytes = static_cast<size_t>(config.vocab_size * D) * 2;
  // Activations at 512 tokens are small next to the weights; keep 1.5 GiB of headroom.
  const size_t available = device_free_bytes(request.device);  // the weights go to that device
  int64_t layers = full_layers;
  std::string why = "all layers";
  if (available > 0) {
    const double headroom = 1.5 * 1024.0 * 1024.0 * 1024.0;
    const double room = static_cast<double>(available) - headroom - static_cast<double>(fixed_bytes);
    const int64_t fit = room > 0 ? static_cast<int64_t>(room / static_cast<double>(layer_bytes)) : 0;
    if (fit < full_layers) {
      layers = std::max<int64_t>(1, fit);
      why = fmt::format("{:.1f} GiB free on {} holds {} layers", gib(available), request.device.str(), fit);
    }
  }
  if (const char* env = std::getenv("FLUXRT_BENCH_T5_LAYERS"); env && *env) {
    const int64_t asked = std::atoll(env);
    if (asked < 1 || asked > full_layers)
      fail(ErrorCode::InvalidArgument, "bench text-encoder: FLUXRT_BENCH_T5_LAYERS={} outside 1..{}", env,
           full_layers);
    if (asked < layers) {
      layers = asked;
      why = "FLUXRT_BENCH_T5_LAYERS";
    }
  }
  config.num_layers = layers;
  const double scale = static_cast<double>(full_layers) / static_cast<double>(layers);
  models::T5EncoderOptions options;
  options.dtype = request.dtype;
  options.device = request.device;

  std::printf("%s\n", bench::machine_line().c_str());
  bench::PeakReadings peaks(!request.skip_peak);
  peaks.take("before load");
  std::printf(
      "text encoder T5-XXL v1.1 for %s: %lld of %lld layers timed (%s), %s, batch %d, %d threads, no mask\n",
      request.variant.c_str(), static_cast<long long>(layers), static_cast<long long>(full_layers),
      why.c_str(), std::string(dtype_name(options.dtype)).c_str(), request.batch, num_threads());
  std::fflush(stdout);
  const double t0 = wall_seconds();
  models::T5Encoder encoder = models::T5Encoder::synthetic(config, options);
  std::printf("synthetic weights: %.2f GiB in %.1f s (full model %.2f GiB)\n", gib(encoder.weight_bytes()),
              wall_seconds() - t0, gib(fixed_bytes + layer_bytes * static_cast<size_t>(full_layers)));
  std::fflush(stdout);

  peaks.take("after load");
  std::vector<int> lengths = {request.variant == "flux.1-schnell" ? 256 : 512};
  if (request.max_sequence_length != lengths[0]) lengths.push_back(request.max_sequence_length);
  std::vector<LengthResult> results;
  for (int length : lengths) {
    if (length < 1 || length > 4096)
      fail(ErrorCode::InvalidArgument, "bench text-encoder: length {} outside 1..4096", length);
    const int64_t B = request.batch, L = length, real = std::min<int64_t>(40, L);
    Tensor ids = Tensor::empty({B, L}, DType::I32);  // [B, L]: 40 prompt ids, </s>, then pads (all computed)
    for (int64_t i = 0; i < B * L; ++i) {
      const int64_t pos = i % L;
      ids.data<int32_t>()[i] =
          pos < real - 1 ? static_cast<int32_t>(3 + (pos * 7919) % 32000) : (pos == real - 1 ? 1 : 0);
    }
    RunTiming t = time_encoder(
        [&] {
          (void)encoder.forward(ids);
          ops::synchronize(request.device);
        },
        5, 60.0);
    std::printf("  length %d: %.1f ms (min of %d)\n", length, t.min_s * 1e3, t.runs);
    std::fflush(stdout);
    results.push_back({length, t, encoder.flops(B, L) * 1e-9, t.min_s * scale});
  }
  peaks.take("after the runs");
  const std::string json_rows = print_results(results, peaks, request.batch, layers);
  if (layers < full_layers)
    std::printf(
        "full-model ms = measured x %lld/%lld (identical layers; embedding and final norm are negligible)\n",
        static_cast<long long>(full_layers), static_cast<long long>(layers));
  std::printf("peak RSS: %.2f GiB\n", gib(process_peak_rss_bytes()));
  if (!request.json_path.empty()) {
    std::ofstream out(request.json_path);
    if (!out) fail(ErrorCode::Io, "bench text-encoder: cannot write {}", request.json_path);
    out << fmt::format(
        "{{\"component\": \"text-encoder\", \"encoder\": \"t5-xxl\", \"variant\": \"{}\", "
        "\"rows\": [{}]}}\n",
        request.variant, json_rows);
  }
  return 0;
}

}  // namespace

int bench_text_encoder(const BenchRequest& request) {
  if (request.variant == "flux.1-dev" || request.variant == "flux.1-schnell")
    return bench_t5_encoder(request);
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
         "bench text-encoder: unknown variant {} (flux.2-klein-4b, flux.2-klein-9b, flux.1-dev, "
         "flux.1-schnell)",
         request.variant);
  }
  models::Qwen3EncoderOptions options;
  options.dtype = request.dtype;
  options.device = request.device;

  std::printf("%s\n", bench::machine_line().c_str());
  bench::PeakReadings peaks(!request.skip_peak);
  peaks.take("before load");
  std::printf("text encoder %s for %s: %lld of %lld layers (taps 9/18/27), %s, batch %d, %d threads\n",
              te_name.c_str(), request.variant.c_str(), static_cast<long long>(options.taps.back()),
              static_cast<long long>(config.num_layers), std::string(dtype_name(options.dtype)).c_str(),
              request.batch, num_threads());
  std::fflush(stdout);

  const double t0 = wall_seconds();
  models::Qwen3Encoder encoder = models::Qwen3Encoder::synthetic(config, options);
  std::printf("synthetic weights: %.2f GiB in %.1f s\n", gib(encoder.weight_bytes()), wall_seconds() - t0);
  std::fflush(stdout);

  peaks.take("after load");

  std::vector<int> lengths = {512, 256};
  if (request.max_sequence_length != 512 && request.max_sequence_length != 256)
    lengths.push_back(request.max_sequence_length);
  std::vector<LengthResult> results;
  for (int length : lengths) {
    const int64_t B = request.batch, L = length, real = std::min<int64_t>(40, L);
    Tensor ids = Tensor::empty({B, L}, DType::I32);   // [B, L]
    Tensor mask = Tensor::empty({B, L}, DType::I32);  // [B, L]
    for (int64_t i = 0; i < B * L; ++i) {
      const int64_t pos = i % L;
      ids.data<int32_t>()[i] = pos < real ? static_cast<int32_t>((pos * 7919) % 151643) : 151643;
      mask.data<int32_t>()[i] = pos < real ? 1 : 0;
    }
    RunTiming t = time_encoder(
        [&] {
          (void)encoder.forward(ids, mask);
          ops::synchronize(request.device);
        },
        5, 60.0);
    std::printf("  length %d: %.1f ms (min of %d)\n", length, t.min_s * 1e3, t.runs);
    std::fflush(stdout);
    results.push_back({length, t, encoder.flops(B, L) * 1e-9, 0.0});
  }
  peaks.take("after the runs");
  const std::string json_rows = print_results(results, peaks, request.batch, 0);
  std::printf(
      "GFLOP/cpu-s: flops per busy CPU-second, compared with the peak's own per-CPU-second rate (robust on "
      "a\n"
      "shared machine, where wall-clock rates mostly measure the neighbours).\n");
  std::printf("peak RSS: %.2f GiB\n", gib(process_peak_rss_bytes()));
  if (!request.json_path.empty()) {
    std::ofstream out(request.json_path);
    if (!out) fail(ErrorCode::Io, "bench text-encoder: cannot write {}", request.json_path);
    out << fmt::format("{{\"component\": \"text-encoder\", \"variant\": \"{}\", \"rows\": [{}]}}\n",
                       request.variant, json_rows);
  }
  return 0;
}

}  // namespace fluxrt::cli
