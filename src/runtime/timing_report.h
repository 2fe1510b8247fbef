#pragma once
// The timing report printed after `fluxrt generate` and `fluxrt bench pipeline` (docs/cli.md):
// load (cold: the first load of the process; warm: a second load with the files in the page
// cache), the warm-up request when there is one, then the timed request split into text encoding,
// reference encoding, denoising loop (ms per step, it/s), VAE decode and image write, the total and
// the peak RSS. Built from the pipeline's Profiler spans (pipelines::kSpan*, pipelines/spans.h), so
// the CLI, the benchmark and a future server report the same figures; the same data as JSON for
// --profile.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include "core/timer.h"

namespace fluxrt::runtime {

struct LoadTimings {
  double total_s = 0;  // wall time of the whole (parallel) load
  double transformer_s = 0;
  double text_encoder_s = 0;
  double vae_s = 0;
};

// One generate call.
struct RunTimings {
  double text_encoding_s = 0;
  // pipelines::kSpanTextEncodingClip / T5 (FLUX.1's encoders inside text_encoding_s), 0 when not recorded
  double clip_encoding_s = 0;
  double t5_encoding_s = 0;
  double reference_encode_s = 0;
  bool has_reference_images = false;
  double denoise_total_s = 0;
  int steps = 0;             // denoise.step spans seen
  double step_min_s = 0;
  double step_max_s = 0;
  // Steps that replayed a recorded graph (GenerateResult::graph_steps), set by the caller when the
  // run asked for graphs (--cuda-graphs); none otherwise.
  std::optional<int> graph_steps;
  double vae_decode_s = 0;
  double load_s = 0;         // loads inside the call (--low-memory loads per request), else 0
  LoadTimings loads;         // their split per component
  double image_write_s = 0;  // set by the caller; 0 for a warm-up (nothing written)
  double total_s = 0;        // the generate call plus the image write, set by the caller

  double ms_per_step() const { return steps > 0 ? 1e3 * denoise_total_s / steps : 0; }
  double steps_per_second() const { return denoise_total_s > 0 ? steps / denoise_total_s : 0; }
};

// Throughput of the denoising loop against the GEMM peak of the same run (bench pipeline only).
struct LoopThroughput {
  double flop = 0;               // GEMMs + attention of every forward of the loop
  double gflops = 0;             // flop / denoise_total_s
  double gemm_peak_gflops = 0;   // 0: not measured
  double gflops_per_cpu_s = 0;   // flop / process CPU seconds of the loop
  double gemm_peak_per_cpu_s = 0;
  std::string peak_source;
};

struct TimingReport {
  std::string model;    // path or repo id, or "synthetic"
  std::string variant;  // e.g. "flux.2-klein-4b (distilled)"
  std::string dtype;
  std::string device;
  int width = 0, height = 0;
  int images = 0;  // in the timed run
  int threads = 0;
  std::optional<LoadTimings> cold_load;
  std::optional<LoadTimings> warm_load;
  std::optional<RunTimings> warmup;
  RunTimings run;
  std::optional<LoopThroughput> throughput;
  bool writes_images = true;  // false for the benchmark: no image-write line, null in JSON
  double total_s = 0;  // wall time of the whole command
  size_t peak_rss_bytes = 0;
};

// Reads the load.* spans (zeros for spans that are absent).
LoadTimings load_timings_from(const Profiler& profiler);
// Reads the spans of one generate call; the caller sets image_write_s and total_s.
RunTimings run_timings_from(const Profiler& profiler);

// A fixed-width table, one figure per line, ending in a newline.
std::string format_timing_report(const TimingReport& report);
// A JSON object with every figure in seconds (null for what did not happen); see docs/cli.md.
std::string timing_report_json(const TimingReport& report);

// Writes `contents` to a hidden temporary in the same folder and renames it over `path`, so a
// reader never sees a partial file. Error(Io) naming the path on failure (the temporary removed).
void write_file_atomically(const std::filesystem::path& path, const std::string& contents);

}  // namespace fluxrt::runtime
