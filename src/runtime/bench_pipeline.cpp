// `fluxrt bench pipeline --synthetic`: the whole FLUX.2 klein pipeline -- Qwen3 prompt encoding,
// the denoising loop, the VAE decode -- on random weights of the variant's real shapes (no files
// but the bundled Qwen3 tokenizer), with the same timing table as `fluxrt generate` plus the loop's
// GFLOP/s (GEMMs + attention, flux-reference.md section 6) and its ratio to the GEMM peak measured
// in the same run, as the other benchmarks report it.
#include <time.h>

#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "core/allocator.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "pipelines/flux2_klein_pipeline.h"
#include "runtime/bench.h"
#include "runtime/bench_common.h"
#include "runtime/generate_job.h"
#include "runtime/timing_report.h"

namespace fluxrt::runtime {
namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int bench_pipeline(const BenchRequest& r) {
  FLUXRT_CHECK(r.synthetic, ErrorCode::InvalidArgument,
               "bench pipeline: only --synthetic is supported (time a real model with fluxrt generate --warmup --profile F)");
  FLUXRT_CHECK(r.variant.rfind("flux.2-klein", 0) == 0, ErrorCode::Unsupported,
               "bench pipeline: variant '{}' is not implemented (flux.2-klein-4b or flux.2-klein-9b)", r.variant);
  FLUXRT_CHECK(r.steps >= 1 && r.batch >= 1 && r.max_sequence_length >= 1 && r.max_sequence_length <= 512,
               ErrorCode::InvalidArgument, "bench pipeline: steps and batch must be >= 1, text length in [1, 512]");
  pipelines::Flux2KleinPipeline::validate_size(r.width, r.height, r.batch);
  const std::filesystem::path tokenizer = find_bundled_qwen_tokenizer();
  Stopwatch command;

  std::printf("%s\n", bench::machine_line().c_str());
  LoopThroughput throughput;
  if (!r.skip_peak) {
    const bench::GemmPeak p = bench::measure_gemm_peak();
    throughput.gemm_peak_gflops = p.bf16_gflops > 0 ? p.bf16_gflops : p.gflops;
    throughput.gemm_peak_per_cpu_s = p.gflops_per_core;
    throughput.peak_source = p.source;
    std::printf("GEMM peak: %.1f GFLOP/s wall, %.1f GFLOP/s per CPU-second (%s)\n", throughput.gemm_peak_gflops,
                p.gflops_per_core, p.source.c_str());
  }
  std::fflush(stdout);

  Profiler profiler;
  pipelines::PipelineOptions options;
  options.dtype = r.dtype;
  options.device = r.device;
  options.load_vae_encoder = false;
  options.profiler = &profiler;
  Stopwatch load_watch;
  auto pipe = pipelines::Flux2KleinPipeline::synthetic(r.variant, tokenizer, options);
  LoadTimings load = load_timings_from(profiler);
  if (load.total_s == 0) load.total_s = load_watch.seconds();
  std::printf("%s: synthetic weights generated and prepared in %.1f s (RSS %.2f GiB)\n", r.variant.c_str(),
              load.total_s, static_cast<double>(process_current_rss_bytes()) / (1 << 30));
  std::fflush(stdout);

  pipelines::GenerateRequest request;
  request.prompts = {"a photograph of a red fox sitting in fresh snow, morning light"};
  request.images_per_prompt = r.batch;
  request.width = r.width;
  request.height = r.height;
  request.num_steps = r.steps;
  request.max_sequence_length = r.max_sequence_length;
  request.seed = 0;
  // Process CPU time from the end of step 1 to the end of the loop: steps 2..N, which is what the
  // per-CPU-second rate is computed over (step 1's start is not observable from here).
  double cpu_after_first = 0, cpu_after_last = 0;
  request.on_step = [&](int step, int total, double seconds) {
    std::printf("  step %d/%d: %.1f ms\n", step, total, seconds * 1e3);
    std::fflush(stdout);
    if (step == 1) cpu_after_first = cpu_seconds();
    if (step == total) cpu_after_last = cpu_seconds();
  };

  TimingReport report;
  report.model = "synthetic";
  report.variant = r.variant;
  report.dtype = std::string(dtype_name(r.dtype));
  report.device = r.device.str();
  report.width = r.width;
  report.height = r.height;
  report.images = r.batch;
  report.threads = num_threads();
  report.cold_load = load;
  report.writes_images = false;
  profiler.clear();
  if (r.warmup) {
    Stopwatch warm;
    pipe->generate(request);
    report.warmup = run_timings_from(profiler);
    report.warmup->total_s = warm.seconds();
    profiler.clear();
  }
  Stopwatch run_watch;
  const pipelines::GenerateResult result = pipe->generate(request);
  report.run = run_timings_from(profiler);
  report.run.total_s = run_watch.seconds();

  const models::Flux2Config& config = pipe->transformer_config();
  const int64_t image_tokens = static_cast<int64_t>(result.height / 16) * (result.width / 16);
  const double forwards_per_step = result.used_cfg ? 2.0 : 1.0;
  const double flop_per_step =
      forwards_per_step * r.batch * config.flops_per_forward(image_tokens, r.max_sequence_length);
  throughput.flop = flop_per_step * report.run.steps;
  throughput.gflops = report.run.denoise_total_s > 0 ? throughput.flop / report.run.denoise_total_s / 1e9 : 0;
  if (report.run.steps > 1 && cpu_after_last > cpu_after_first)
    throughput.gflops_per_cpu_s = flop_per_step * (report.run.steps - 1) / (cpu_after_last - cpu_after_first) / 1e9;
  report.throughput = throughput;
  report.total_s = command.seconds();
  report.peak_rss_bytes = process_peak_rss_bytes();

  std::printf("\n%s", format_timing_report(report).c_str());
  std::fflush(stdout);
  if (!r.json_path.empty()) write_file_atomically(r.json_path, timing_report_json(report));
  return 0;
}

}  // namespace fluxrt::runtime
