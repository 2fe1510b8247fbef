#pragma once
// The timing report (docs/cli.md): load (cold: the first load of the process; warm: a second
// load with the files in the page cache), an untimed warm-up request when there is one, then the
// timed request split into text encoding, reference encoding, denoising loop (ms per step, it/s),
// VAE decode and image write, the total and the peak RSS. Engine::generate returns it with every
// result, so `fluxrt generate`, `fluxrt bench pipeline` and a server report the same figures.
// Seconds throughout; a figure that did not happen is 0 (or unset where 0 would mislead).
#include <cstddef>
#include <optional>
#include <string>

namespace fluxrt {

struct LoadTimings {
  double total_s = 0;  // wall time of the whole (parallel) load
  double transformer_s = 0;
  double text_encoder_s = 0;
  double vae_s = 0;
};

// One generate call.
struct RunTimings {
  double text_encoding_s = 0;
  // FLUX.1's two encoders inside text_encoding_s (CLIP-L, T5-XXL); 0 when not recorded (klein).
  double clip_encoding_s = 0;
  double t5_encoding_s = 0;
  double reference_encode_s = 0;
  bool has_reference_images = false;
  // Reference images of the call, and how many of them the engine's reference cache already
  // held encoded (a hit skips the VAE encoder).
  int reference_images = 0;
  int reference_images_cached = 0;
  // klein-9B-KV: the pass that computes the reference keys and values (once per request, before
  // the loop) and their size, freed when the request ends; 0 otherwise.
  double reference_kv_s = 0;
  size_t reference_kv_bytes = 0;
  // The kernels' one-time work for the request's shapes, done before the first step (CPU; 0
  // where the backend needs none); not in denoise_total_s.
  double kernel_planning_s = 0;
  double denoise_total_s = 0;
  int steps = 0;  // denoising steps timed
  double step_min_s = 0;
  double step_max_s = 0;
  // Steps that replayed a recorded graph (EngineOptions::cuda_graphs); unset without graphs.
  std::optional<int> graph_steps;
  // With a step cache: one character per step, F the whole transformer ran, C the cache was
  // reused, P the CFG branches differed; "" without one.
  std::string cache_steps;
  double vae_decode_s = 0;
  double load_s = 0;         // loads inside the call (low-memory mode, free_text_encoder), else 0
  LoadTimings loads;         // their split per component
  double image_write_s = 0;  // set by whoever writes the images; 0 when nothing was written
  double total_s = 0;        // the generate call (plus the image write, when the writer adds it)

  double ms_per_step() const { return steps > 0 ? 1e3 * denoise_total_s / steps : 0; }
  double steps_per_second() const { return denoise_total_s > 0 ? steps / denoise_total_s : 0; }
};

// Throughput of the denoising loop against the peaks of the same run (`fluxrt bench pipeline`
// only). Each peak is the best of several short readings taken through the run (before and after
// the load, between warm-up and timed run, after it): on a shared machine one reading can be a
// fraction of the next, and the spread says how much.
struct LoopThroughput {
  double flop = 0;    // GEMMs + attention of every forward of the counted steps
  double gflops = 0;  // flop / the time of the counted steps (the loop's, when all)
  // 0: every step is counted; else a step cache ran and only this many steps, those run fully,
  // are (a cached step runs a part of the model that the FLOP count cannot tell).
  int steps_counted = 0;
  double gemm_peak_gflops = 0;  // the best reading; 0: not measured
  double gflops_per_cpu_s = 0;  // flop / process CPU seconds of the loop
  double gemm_peak_per_cpu_s = 0;
  std::string peak_source;
  int gemm_peak_readings = 0;       // how many readings gemm_peak_gflops is the best of
  double gemm_peak_min_gflops = 0;  // the lowest of them
  std::string gemm_peak_taken;      // when they were taken: "before load/after load/after the run"
  // The multiply unit's own ceiling from registers (backend/cpu_bench.h's probe), best of the
  // same readings; 0: not measured (or no probe for this CPU).
  double register_peak_gflops = 0;
  double register_peak_min_gflops = 0;
  double register_peak_per_cpu_s = 0;
  std::string register_peak_unit;  // "AMX TDPBF16PS", "AVX512_BF16 VDPBF16PS", "AVX2 FMA f32"
};

struct TimingReport {
  std::string model;    // path or repo id as given, or "synthetic"
  std::string variant;  // e.g. "FLUX.2-klein-4B (distilled)"
  std::string dtype;    // "bf16", "f32" or "int8"
  std::string device;   // "cpu", "cuda:0", ...
  int width = 0, height = 0;
  int images = 0;  // in the timed run
  int threads = 0;
  std::optional<LoadTimings> cold_load;
  std::optional<LoadTimings> warm_load;
  std::optional<RunTimings> warmup;
  RunTimings run;
  std::optional<LoopThroughput> throughput;
  bool writes_images = true;  // false for the benchmark: no image-write line, null in JSON
  double total_s = 0;         // wall time of the whole command (the generate call, from the Engine)
  size_t peak_rss_bytes = 0;  // the process's peak resident memory so far
};

// A fixed-width table, one figure per line, ending in a newline (what `fluxrt generate` prints).
std::string format_timing_report(const TimingReport& report);
// A JSON object with every figure in seconds (null for what did not happen); see docs/cli.md.
std::string timing_report_json(const TimingReport& report);

}  // namespace fluxrt
