// `fluxrt bench pipeline --synthetic`: a whole pipeline -- prompt encoding, the denoising loop, the
// VAE decode -- on random weights of a variant's real shapes (no files but the checked-in
// tokenizers), with the same timing table as `fluxrt generate` plus the loop's GFLOP/s (GEMMs +
// attention, flux-reference.md section 6) and its ratio to the GEMM and register peaks read
// through the same run (bench_common.h's PeakReadings), as the other benchmarks report them. The pipeline
// comes from the kind offering the variant (pipelines/synthetic.h); one made per request (FLUX.1's, in
// low-memory order) is made before anything is measured and says how its shapes are laid out.
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_common.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "fluxrt/request_fields.h"
#include "pipelines/pipeline.h"
#include "pipelines/schedule.h"
#include "runtime/model_resolution.h"
#include "runtime/timing_report.h"

namespace fluxrt::cli {
namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The loop's peaks: the best of the readings taken through the run, with their spread.
void set_peaks(const bench::PeakReadings& readings, runtime::LoopThroughput& throughput) {
  if (readings.count() == 0) return;
  throughput.gemm_peak_gflops = readings.gemm_best();
  throughput.gemm_peak_per_cpu_s = readings.gemm_best_per_core();
  throughput.peak_source = readings.gemm_source();
  throughput.gemm_peak_readings = readings.count();
  throughput.gemm_peak_min_gflops = readings.gemm_worst();
  throughput.gemm_peak_taken = readings.when_taken();
  throughput.register_peak_gflops = readings.register_best();
  throughput.register_peak_min_gflops = readings.register_worst();
  throughput.register_peak_per_cpu_s = readings.register_best_per_core();
  throughput.register_peak_unit = readings.register_unit();
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
  if (!r.cache.empty()) request.cache = fluxrt::parse_cache_config(r.cache, "--cache");
  // Deterministic pixel noise, a different pattern per image.
  auto noise_image = [&](int i) {
    fluxrt::Image image;
    image.width = r.width;
    image.height = r.height;
    image.rgb.resize(static_cast<size_t>(r.width) * r.height * 3);
    uint32_t state = 0x9e3779b9u * static_cast<uint32_t>(i + 1);
    for (uint8_t& p : image.rgb) {
      state = state * 1664525u + 1013904223u;
      p = static_cast<uint8_t>(state >> 24);
    }
    return image;
  };
  for (int i = 0; i < r.references; ++i) request.reference_images.push_back(noise_image(i));
  if (r.mask > 0) {
    // Inpainting: the source, and a centred white rectangle of the image's aspect covering
    // `mask` of it (the work does not depend on the mask's shape, only the blend reads it).
    request.init_image = noise_image(r.references);
    fluxrt::Image mask{r.width, r.height,
                       std::vector<uint8_t>(static_cast<size_t>(r.width) * r.height * 3, 0)};
    const double side = std::sqrt(r.mask);
    const int mw = std::max(1, static_cast<int>(std::lround(side * r.width)));
    const int mh = std::max(1, static_cast<int>(std::lround(side * r.height)));
    for (int y = (r.height - mh) / 2; y < (r.height - mh) / 2 + mh; ++y)
      std::fill_n(&mask.rgb[(static_cast<size_t>(y) * r.width + (r.width - mw) / 2) * 3],
                  static_cast<size_t>(mw) * 3, uint8_t{255});
    request.mask_image = std::move(mask);
    request.strength = 1.0f;  // every step runs, as a plain request's do
  }
  return request;
}

// The optional untimed warm-up request, then the timed one, each timed from `profiler`'s spans
// (and the timed one's replayed steps when the pipeline records them).
// A peak reading goes between the two (not between steps: the step callback's time counts in the
// loop's span).
pipelines::GenerateResult warm_up_and_run(pipelines::Pipeline& pipe, const fluxrt::GenerateRequest& request,
                                          const pipelines::CallContext& call, bool warmup, Profiler& profiler,
                                          runtime::TimingReport& report, bench::PeakReadings& peaks) {
  if (warmup) {
    Stopwatch warm;
    pipe.generate(request, call);
    report.warmup = runtime::run_timings_from(profiler);
    report.warmup->total_s = warm.seconds();
    peaks.take("between warm-up and run");
    profiler.clear();
  }
  Stopwatch run_watch;
  const pipelines::GenerateResult result = pipe.generate(request, call);
  report.run = runtime::run_timings_from(profiler);
  report.run.total_s = run_watch.seconds();
  if (pipe.options().cuda_graphs) report.run.graph_steps = result.graph_steps;
  return result;
}

// "F8_E4M3 " for quantized synthetic weights, "" for dense ones.
std::string weights_label(const pipelines::PipelineOptions& options) {
  return options.synthetic_weights ? std::string(quant_name(*options.synthetic_weights)) + " "
                                   : std::string();
}

// The kind offering `variant` to the bench; InvalidArgument listing every kind's.
const pipelines::PipelineKind& bench_kind(const std::string& variant) {
  std::string known;
  for (const pipelines::PipelineKind* kind : pipelines::pipeline_kinds()) {
    for (const std::string& v : kind->bench_variants) {
      if (v == variant) return *kind;
      known += (known.empty() ? "" : ", ") + v;
    }
  }
  fail(ErrorCode::InvalidArgument, "bench pipeline: variant '{}' is not implemented ({})", variant, known);
}

}  // namespace

int bench_pipeline(const BenchRequest& r) {
  FLUXRT_CHECK(r.synthetic, ErrorCode::InvalidArgument,
               "bench pipeline: only --synthetic is supported (time a real model with fluxrt generate "
               "--warmup --profile F)");
  FLUXRT_CHECK(r.steps >= 1 && r.batch >= 1 && r.max_sequence_length >= 1 && r.max_sequence_length <= 512,
               ErrorCode::InvalidArgument,
               "bench pipeline: steps and batch must be >= 1, text length in [1, 512]");
  const pipelines::PipelineKind& kind = bench_kind(r.variant);
  kind.validate_size(r.width, r.height, r.batch, 8, {});
  pipelines::SyntheticRequest made;
  made.variant = r.variant;
  made.weights = bench_weight_type(r.weights, "bench pipeline");
  made.weights_name = r.weights;
  made.source_dir = runtime::source_tree_dir();
  made.share_dir = runtime::install_share_dir();
  const pipelines::SyntheticPipeline synthetic = kind.synthetic(made);
  Stopwatch command;

  Profiler profiler;
  pipelines::PipelineOptions options;
  options.dtype = r.dtype;
  options.device = r.device;
  if (r.int8_linears) options.transformer_linears = nn::LinearFormat::Int8;
  options.load_vae_encoder = r.references > 0 || r.mask > 0;
  options.low_memory = synthetic.always_low_memory || r.low_memory;
  options.free_text_encoder = !r.keep_text_encoder;
  // Made per request, its step graphs are per request too.
  options.cuda_graphs = r.cuda_graphs;
  options.synthetic_weights = made.weights;
  options.profiler = &profiler;
  std::unique_ptr<pipelines::Pipeline> pipe;
  runtime::LoopThroughput throughput;
  std::optional<runtime::LoadTimings> load;
  bench::PeakReadings peaks(!r.skip_peak);
  // Low memory, or the text encoder apart: the request makes the components (all of them, or the
  // text encoder and then the others), and the report shows those loads inside the run.
  const bool made_in_run = options.components_made_by_requests();
  if (made_in_run) {
    // Nothing is made here (so this is cheap and checks the variant).
    pipe = synthetic.make(options);
    profiler.clear();
    std::printf("%s\n", bench::machine_line().c_str());
    if (synthetic.shapes_note) std::printf("%s\n", synthetic.shapes_note(*pipe).c_str());
    std::printf("%s: synthetic %sweights, %s\n", r.variant.c_str(), weights_label(options).c_str(),
                options.low_memory
                    ? "one component resident at a time, each made by the request and freed after it"
                    : "made by the request, the text encoder freed before the transformer "
                      "(--keep-text-encoder: all made at open and kept)");
    peaks.take("before the run");
  } else {
    std::printf("%s\n", bench::machine_line().c_str());
    peaks.take("before load");
    Stopwatch load_watch;
    pipe = synthetic.make(options);
    load = runtime::load_timings_from(profiler);
    if (load->total_s == 0) load->total_s = load_watch.seconds();
    std::printf("%s: synthetic %sweights generated and prepared in %.1f s (RSS %.2f GiB)\n",
                r.variant.c_str(), weights_label(options).c_str(), load->total_s,
                static_cast<double>(process_current_rss_bytes()) / (1 << 30));
    std::fflush(stdout);
    peaks.take("after load");
  }

  const fluxrt::GenerateRequest request = bench_request(r);
  pipelines::CallContext call;
  // Each step's wall time and the process CPU time at its end (the timed run's: a warm-up's are
  // cleared at its step 1). The per-CPU-second rate is over steps 2..N, from the end of step 1
  // (step 1's start is not observable from here); with a step cache over those run fully.
  std::vector<double> step_seconds, step_cpu_end;
  call.on_step = [&](int step, int total, double seconds, float) {
    if (step == 1) step_seconds.clear(), step_cpu_end.clear();
    step_seconds.push_back(seconds);
    step_cpu_end.push_back(cpu_seconds());
    // Made per request, the memory changes within a run: each step says where it stands.
    if (made_in_run)
      std::printf("  step %d/%d: %.1f ms (RSS %.2f GiB)\n", step, total, seconds * 1e3,
                  static_cast<double>(process_current_rss_bytes()) / (1 << 30));
    else
      std::printf("  step %d/%d: %.1f ms\n", step, total, seconds * 1e3);
    std::fflush(stdout);
  };

  runtime::TimingReport report;
  report.model = "synthetic";
  report.variant = synthetic.variant;
  report.dtype = bench_dtype_name(r);
  report.device = r.device.str();
  report.width = r.width;
  report.height = r.height;
  report.images = r.batch;
  report.threads = num_threads();
  if (load) report.cold_load = *load;
  report.writes_images = false;
  profiler.clear();
  const pipelines::GenerateResult result =
      warm_up_and_run(*pipe, request, call, r.warmup, profiler, report, peaks);
  // The peak RSS is the pipeline's: read before the last peak reading's matrices (48 MiB) are made.
  report.peak_rss_bytes = process_peak_rss_bytes();
  peaks.take("after the run");
  set_peaks(peaks, throughput);
  report.run.cache_steps = result.cache_steps;
  report.run.reference_images = result.reference_latents;
  report.run.reference_images_cached = result.reference_latents_kept;
  report.run.reference_kv_bytes = result.reference_kv_bytes;

  // Packed tokens as the pipeline counts them: (H / 2f) * (W / 2f), f its VAE's factor.
  const int64_t image_tokens =
      pipelines::packed_image_seq_len(result.height, result.width, pipe->facts().vae_scale_factor);
  const double forwards_per_step = result.used_cfg ? 2.0 : 1.0;
  // The reference tokens the pipeline ran with (klein inpainting's source among them; Kontext's
  // image at its preferred resolution, whatever the request's size).
  const int64_t reference_tokens = result.reference_tokens;
  FLUXRT_CHECK(reference_tokens == 0 || synthetic.flops_with_references, ErrorCode::Internal,
               "bench pipeline: {} ran reference tokens it cannot count", r.variant);
  const double flop_per_forward =
      reference_tokens > 0
          ? synthetic.flops_with_references(*pipe, image_tokens, r.max_sequence_length, reference_tokens)
          : synthetic.flops_per_forward(*pipe, image_tokens, r.max_sequence_length);
  if (reference_tokens > 0)
    std::printf("reference tokens per forward: %lld (beside %lld image tokens)\n",
                static_cast<long long>(reference_tokens), static_cast<long long>(image_tokens));
  const double flop_per_step = forwards_per_step * r.batch * flop_per_forward;
  const std::string& decisions = result.cache_steps;
  if (!decisions.empty() && decisions.size() == step_seconds.size()) {
    // A cached step runs a part of the model that the FLOP count cannot tell, so the figures are
    // over the steps run fully ('F'); counting every step at full cost read up to 239%.
    double seconds = 0, cpu = 0;
    int full = 0, full_after_first = 0;
    for (size_t i = 0; i < decisions.size(); ++i) {
      if (decisions[i] != 'F') continue;
      ++full;
      seconds += step_seconds[i];
      if (i > 0) {
        cpu += step_cpu_end[i] - step_cpu_end[i - 1];
        ++full_after_first;
      }
    }
    throughput.steps_counted = full;
    throughput.flop = flop_per_step * full;
    throughput.gflops = seconds > 0 ? throughput.flop / seconds / 1e9 : 0;
    if (cpu > 0) throughput.gflops_per_cpu_s = flop_per_step * full_after_first / cpu / 1e9;
  } else {
    throughput.flop = flop_per_step * report.run.steps;
    throughput.gflops =
        report.run.denoise_total_s > 0 ? throughput.flop / report.run.denoise_total_s / 1e9 : 0;
    const double cpu = step_cpu_end.size() > 1 ? step_cpu_end.back() - step_cpu_end.front() : 0;
    if (cpu > 0) throughput.gflops_per_cpu_s = flop_per_step * (step_cpu_end.size() - 1) / cpu / 1e9;
  }
  report.throughput = throughput;
  report.total_s = command.seconds();

  std::printf("\n%s", runtime::format_timing_report(report).c_str());
  std::fflush(stdout);
  if (!r.json_path.empty()) runtime::write_file_atomically(r.json_path, runtime::timing_report_json(report));
  return 0;
}

}  // namespace fluxrt::cli
