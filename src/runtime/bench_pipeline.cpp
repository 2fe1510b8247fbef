// `fluxrt bench pipeline --synthetic`: the whole FLUX.2 klein or FLUX.1 pipeline -- prompt encoding
// (Qwen3; CLIP-L + T5-XXL), the denoising loop, the VAE decode -- on random weights of the
// variant's real shapes (no files but the checked-in tokenizers), with the same timing table as
// `fluxrt generate` plus the loop's GFLOP/s (GEMMs + attention, flux-reference.md section 6) and
// its ratio to the GEMM peak measured in the same run, as the other benchmarks report it.
//
// FLUX.1 is 12B parameters (24 GB of bf16) next to T5-XXL (9.5 GB): it runs in low-memory order
// (text encoders made, used and freed before the transformer) and with the 19 double blocks
// sharing one weight set and the 38 single blocks another (Flux1Config::shared_block_weights):
// the same shapes, FLOPs and bytes streamed per block, about 1 GB resident; the header says so.
#include <fmt/format.h>
#include <time.h>

#include <cstdio>
#include <string>

#include "core/allocator.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "pipelines/flux1_pipeline.h"
#include "pipelines/flux2_klein_pipeline.h"
#include "pipelines/schedule.h"
#include "runtime/bench.h"
#include "runtime/bench_common.h"
#include "runtime/model_resolution.h"
#include "runtime/timing_report.h"

namespace fluxrt::runtime {
namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

LoopThroughput measure_peak(const BenchRequest& r) {
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
  return throughput;
}

fluxrt::GenerateRequest bench_request(const BenchRequest& r) {
  fluxrt::GenerateRequest request;
  request.prompts = {"a photograph of a red fox sitting in fresh snow, morning light"};
  request.images_per_prompt = r.batch;
  request.width = r.width;
  request.height = r.height;
  request.steps = r.steps;
  request.max_sequence_length = r.max_sequence_length;
  request.seed = 0;
  return request;
}

// The optional untimed warm-up request, then the timed one, each timed from `profiler`'s spans
// (and the timed one's replayed steps when the pipeline records them).
template <typename Pipeline>
pipelines::GenerateResult warm_up_and_run(Pipeline& pipe, const fluxrt::GenerateRequest& request,
                                          const pipelines::CallContext& call, bool warmup, Profiler& profiler,
                                          TimingReport& report) {
  if (warmup) {
    Stopwatch warm;
    pipe.generate(request, call);
    report.warmup = run_timings_from(profiler);
    report.warmup->total_s = warm.seconds();
    profiler.clear();
  }
  Stopwatch run_watch;
  const pipelines::GenerateResult result = pipe.generate(request, call);
  report.run = run_timings_from(profiler);
  report.run.total_s = run_watch.seconds();
  if (pipe.options().cuda_graphs) report.run.graph_steps = result.graph_steps;
  return result;
}

// The CLIP (vocab.json + merges.txt) and T5 (spiece.model) tokenizers checked in with the tiny
// FLUX.1 test folder, or installed next to the executable.
std::filesystem::path find_flux1_tokenizer(const char* name) {
  std::string looked;
  for (const std::filesystem::path& base : {source_tree_dir() / "tests" / "data" / "models" / "flux1-dev-tiny",
                                            install_share_dir() / "tokenizers" / "flux1"}) {
    if (base.parent_path().empty()) continue;
    std::error_code ec;
    if (std::filesystem::is_directory(base / name, ec)) return base / name;
    looked += (looked.empty() ? "" : ", ") + (base / name).string();
  }
  fail(ErrorCode::NotFound, "bench pipeline: no FLUX.1 {} folder found (looked in {})", name, looked);
}

// FLUX.1 through Flux1Pipeline::synthetic with shared block weights, in low-memory order.
int bench_flux1_pipeline(const BenchRequest& r) {
  // flux.1-tiny: the tiny test folder's shapes (a smoke test of this path, nothing shared).
  const bool tiny = r.variant == "flux.1-tiny";
  if (!tiny) models::flux1_preset(r.variant);  // the error names the variant as given
  FLUXRT_CHECK(r.weights == "bf16", ErrorCode::InvalidArgument,
               "bench pipeline: --weights {} is for FLUX.2 klein (FLUX.1's synthetic weights are bf16)",
               r.weights);
  pipelines::Flux1Pipeline::validate_size(r.width, r.height, r.batch);
  const std::filesystem::path clip_tokenizer = find_flux1_tokenizer("tokenizer");
  const std::filesystem::path t5_tokenizer = find_flux1_tokenizer("tokenizer_2");
  Stopwatch command;

  Profiler profiler;
  pipelines::PipelineOptions options;
  options.dtype = r.dtype;
  options.device = r.device;
  options.load_vae_encoder = false;
  options.low_memory = true;
  options.cuda_graphs = r.cuda_graphs;  // per request here (low-memory: the transformer is made per request)
  options.profiler = &profiler;
  // Low-memory: nothing is made here (so this is cheap and checks the variant name); every request
  // makes, uses and frees each component, and the report shows those loads inside the run.
  auto pipe = pipelines::Flux1Pipeline::synthetic(tiny ? r.variant : r.variant + models::kFlux1SharedBlocksSuffix,
                                                  clip_tokenizer, t5_tokenizer, options);
  profiler.clear();
  const models::Flux1Config& shapes = pipe->transformer_config();

  std::printf("%s\n", bench::machine_line().c_str());
  if (shapes.shared_block_weights) {
    std::printf("synthetic: %s shapes (%.2fB parameters); the %lld double blocks share one weight set and the %lld "
                "single blocks share one (same shapes, FLOPs and weight bytes streamed per block as the real model); "
                "CLIP-L and T5-XXL unshared; low-memory order (text encoders freed before the transformer is made)\n",
                r.variant.c_str(), static_cast<double>(shapes.parameter_count()) / 1e9,
                static_cast<long long>(shapes.double_blocks), static_cast<long long>(shapes.single_blocks));
  } else {
    std::printf("synthetic: %s shapes, random weights, low-memory order\n", r.variant.c_str());
  }
  LoopThroughput throughput = measure_peak(r);

  const fluxrt::GenerateRequest request = bench_request(r);
  pipelines::CallContext call;
  double cpu_after_first = 0, cpu_after_last = 0;
  call.on_step = [&](int step, int total, double seconds, float) {
    std::printf("  step %d/%d: %.1f ms (RSS %.2f GiB)\n", step, total, seconds * 1e3,
                static_cast<double>(process_current_rss_bytes()) / (1 << 30));
    std::fflush(stdout);
    if (step == 1) cpu_after_first = cpu_seconds();
    if (step == total) cpu_after_last = cpu_seconds();
  };

  TimingReport report;
  report.model = "synthetic";
  report.variant = shapes.shared_block_weights ? r.variant + " (blocks share weights)" : r.variant;
  report.dtype = std::string(dtype_name(r.dtype));
  report.device = r.device.str();
  report.width = r.width;
  report.height = r.height;
  report.images = r.batch;
  report.threads = num_threads();
  report.writes_images = false;
  const pipelines::GenerateResult result = warm_up_and_run(*pipe, request, call, r.warmup, profiler, report);

  const models::Flux1Config& config = pipe->transformer_config();
  // Packed tokens as the pipeline counts them: (H / 2f) * (W / 2f), f its VAE's factor.
  const int64_t image_tokens =
      pipelines::packed_image_seq_len(result.height, result.width, pipe->vae_scale_factor());
  const double forwards_per_step = result.used_cfg ? 2.0 : 1.0;
  const double flop_per_step = forwards_per_step * r.batch * config.flops_per_forward(image_tokens, r.max_sequence_length);
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

}  // namespace

int bench_pipeline(const BenchRequest& r) {
  FLUXRT_CHECK(r.synthetic, ErrorCode::InvalidArgument,
               "bench pipeline: only --synthetic is supported (time a real model with fluxrt generate --warmup --profile F)");
  FLUXRT_CHECK(r.steps >= 1 && r.batch >= 1 && r.max_sequence_length >= 1 && r.max_sequence_length <= 512,
               ErrorCode::InvalidArgument, "bench pipeline: steps and batch must be >= 1, text length in [1, 512]");
  if (r.variant.rfind("flux.1-", 0) == 0) return bench_flux1_pipeline(r);
  FLUXRT_CHECK(r.variant.rfind("flux.2-klein", 0) == 0, ErrorCode::Unsupported,
               "bench pipeline: variant '{}' is not implemented (flux.2-klein-4b, flux.2-klein-9b, flux.1-dev, "
               "flux.1-schnell)",
               r.variant);
  pipelines::Flux2KleinPipeline::validate_size(r.width, r.height, r.batch);
  const std::optional<QuantType> weight_type = bench_weight_type(r.weights, "bench pipeline");
  const std::filesystem::path tokenizer = find_bundled_qwen_tokenizer();
  Stopwatch command;

  std::printf("%s\n", bench::machine_line().c_str());
  LoopThroughput throughput = measure_peak(r);

  Profiler profiler;
  pipelines::PipelineOptions options;
  options.dtype = r.dtype;
  options.device = r.device;
  options.load_vae_encoder = false;
  options.low_memory = r.low_memory;
  options.cuda_graphs = r.cuda_graphs;
  options.synthetic_weights = weight_type;
  options.profiler = &profiler;
  Stopwatch load_watch;
  auto pipe = pipelines::Flux2KleinPipeline::synthetic(r.variant, tokenizer, options);
  LoadTimings load = load_timings_from(profiler);
  if (load.total_s == 0) load.total_s = load_watch.seconds();
  const std::string weights =
      options.synthetic_weights ? std::string(quant_name(*options.synthetic_weights)) + " " : std::string();
  std::printf("%s: synthetic %sweights generated and prepared in %.1f s (RSS %.2f GiB)\n", r.variant.c_str(),
              weights.c_str(), load.total_s, static_cast<double>(process_current_rss_bytes()) / (1 << 30));
  std::fflush(stdout);

  const fluxrt::GenerateRequest request = bench_request(r);
  pipelines::CallContext call;
  // Process CPU time from the end of step 1 to the end of the loop: steps 2..N, which is what the
  // per-CPU-second rate is computed over (step 1's start is not observable from here).
  double cpu_after_first = 0, cpu_after_last = 0;
  call.on_step = [&](int step, int total, double seconds, float) {
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
  const pipelines::GenerateResult result = warm_up_and_run(*pipe, request, call, r.warmup, profiler, report);

  const models::Flux2Config& config = pipe->transformer_config();
  // Packed tokens as the pipeline counts them: (H / 2f) * (W / 2f), f its VAE's factor.
  const int64_t image_tokens =
      pipelines::packed_image_seq_len(result.height, result.width, pipe->vae_scale_factor());
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
