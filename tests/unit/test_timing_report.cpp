// Timing report (runtime/timing_report.h): figures read from the pipeline's Profiler spans, the
// text table, the JSON document (every field, null for what did not happen) and atomic JSON
// writes. The progress texts are the CLI's (tests/apps/test_cli_progress.cpp).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/timer.h"
#include "pipelines/spans.h"
#include "runtime/timing_report.h"

namespace fs = std::filesystem;
namespace pl = fluxrt::pipelines;
namespace rt = fluxrt::runtime;

namespace {

rt::RunTimings run_spans(int steps, bool reference) {
  fluxrt::Profiler p;
  p.add(pl::kSpanTextEncoding, 0.25);
  if (reference) p.add(pl::kSpanReferenceEncode, 0.125);
  for (int s = 0; s < steps; ++s) p.add(pl::kSpanDenoiseStep, 0.5 + 0.25 * s);
  p.add(pl::kSpanDenoiseTotal, 0.5 * steps + 0.25 * steps * (steps - 1) / 2.0);
  p.add(pl::kSpanVaeDecode, 0.75);
  return rt::run_timings_from(p);
}

rt::TimingReport sample_report() {
  rt::TimingReport t;
  t.model = "models/demo";
  t.variant = "custom";
  t.dtype = "f32";
  t.device = "cpu";
  t.width = 64;
  t.height = 48;
  t.images = 2;
  t.threads = 2;
  fluxrt::Profiler load;
  load.add(pl::kSpanLoadTransformer, 1.0);
  load.add(pl::kSpanLoadTextEncoder, 2.0);
  load.add(pl::kSpanLoadVae, 0.5);
  load.add(pl::kSpanLoadTotal, 2.5);
  t.cold_load = rt::load_timings_from(load);
  t.run = run_spans(4, false);
  t.run.image_write_s = 0.01;
  t.run.total_s = 5.0;
  t.total_s = 8.0;
  t.peak_rss_bytes = size_t{3} << 29;  // 1.5 GiB
  return t;
}

// The loop's figures (`fluxrt bench pipeline`): 7 TFLOP at 2000 GFLOP/s (500 per CPU-second)
// against a GEMM peak of 4000 (1000 per CPU-second).
rt::LoopThroughput sample_throughput(const char* peak_source) {
  rt::LoopThroughput p;
  p.flop = 7e12;
  p.gflops = 2000.0;
  p.gemm_peak_gflops = 4000.0;
  p.gflops_per_cpu_s = 500.0;
  p.gemm_peak_per_cpu_s = 1000.0;
  p.peak_source = peak_source;
  return p;
}

}  // namespace

TEST(TimingReport, ReadsProfilerSpans) {
  const rt::RunTimings r = run_spans(4, true);
  EXPECT_DOUBLE_EQ(r.text_encoding_s, 0.25);
  EXPECT_TRUE(r.has_reference_images);
  EXPECT_DOUBLE_EQ(r.reference_encode_s, 0.125);
  EXPECT_EQ(r.steps, 4);
  EXPECT_DOUBLE_EQ(r.denoise_total_s, 3.5);
  EXPECT_DOUBLE_EQ(r.step_min_s, 0.5);
  EXPECT_DOUBLE_EQ(r.step_max_s, 1.25);
  EXPECT_DOUBLE_EQ(r.ms_per_step(), 875.0);
  EXPECT_NEAR(r.steps_per_second(), 4 / 3.5, 1e-12);
  EXPECT_DOUBLE_EQ(r.vae_decode_s, 0.75);
  EXPECT_DOUBLE_EQ(r.load_s, 0);
  const rt::RunTimings none = run_spans(2, false);
  EXPECT_FALSE(none.has_reference_images);

  // Sequential loads (no load.total span, e.g. --low-memory) add up.
  fluxrt::Profiler seq;
  seq.add(pl::kSpanLoadTextEncoder, 1.0);
  seq.add(pl::kSpanLoadTransformer, 2.0);
  const rt::LoadTimings l = rt::load_timings_from(seq);
  EXPECT_DOUBLE_EQ(l.total_s, 3.0);
  EXPECT_DOUBLE_EQ(l.vae_s, 0);
}

// --low-memory loads inside the run, with their split; the FLUX.1 encoders' optional sub-spans.
TEST(TimingReport, LoadsInsideTheRunAndTextEncoderSplit) {
  fluxrt::Profiler p;
  p.add(pl::kSpanLoadTextEncoder, 1.0);
  p.add(pl::kSpanLoadTransformer, 2.0);
  p.add(pl::kSpanLoadVae, 0.5);
  p.add(pl::kSpanTextEncoding, 0.75);
  p.add(pl::kSpanTextEncodingClip, 0.25);
  p.add(pl::kSpanTextEncodingT5, 0.5);
  rt::TimingReport t = sample_report();
  t.run = rt::run_timings_from(p);
  EXPECT_DOUBLE_EQ(t.run.load_s, 3.5);
  EXPECT_DOUBLE_EQ(t.run.loads.transformer_s, 2.0);
  EXPECT_DOUBLE_EQ(t.run.clip_encoding_s, 0.25);
  EXPECT_DOUBLE_EQ(t.run.t5_encoding_s, 0.5);
  const std::string text = rt::format_timing_report(t);
  for (const char* needle : {"load (in run)", "3500.0 ms", "transformer 2000.0, text encoder 1000.0, VAE 500.0 ms",
                             "CLIP 250.0, T5 500.0 ms"})
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  const nlohmann::json j = nlohmann::json::parse(rt::timing_report_json(t));
  EXPECT_DOUBLE_EQ(j["run"]["load_detail"]["vae_s"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["run"]["clip_encoding_s"].get<double>(), 0.25);
  // Without them: no detail, nulls.
  const nlohmann::json plain = nlohmann::json::parse(rt::timing_report_json(sample_report()));
  EXPECT_TRUE(plain["run"]["load_detail"].is_null());
  EXPECT_TRUE(plain["run"]["t5_encoding_s"].is_null());
  EXPECT_EQ(rt::format_timing_report(sample_report()).find("CLIP"), std::string::npos);
}

TEST(TimingReport, TextTable) {
  rt::TimingReport t = sample_report();
  std::string text = rt::format_timing_report(t);
  for (const char* needle : {"timing: models/demo (custom), 64x48, 2 images, 4 steps, f32, cpu, 2 threads",
                             "cold load", "2500.0 ms", "transformer 1000.0, text encoder 2000.0, VAE 500.0 ms",
                             "text encoding", "250.0 ms", "denoising loop", "3500.0 ms",
                             "875.0 ms/step (min 500.0, max 1250.0), 1.14 it/s", "VAE decode", "750.0 ms",
                             "image write", "10.0 ms", "run total", "5000.0 ms", "total", "8000.0 ms", "peak RSS",
                             "1.50 GiB"})
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  EXPECT_EQ(text.find("warm load"), std::string::npos);
  EXPECT_EQ(text.find("warm-up"), std::string::npos);
  EXPECT_EQ(text.find("GFLOP/s"), std::string::npos);
  EXPECT_EQ(text.find("CUDA graphs"), std::string::npos) << "no graph line when graphs were not asked for";
  EXPECT_EQ(text.back(), '\n');

  t.warm_load = t.cold_load;
  t.warmup = t.run;
  t.throughput = sample_throughput("oneDNN");
  text = rt::format_timing_report(t);
  for (const char* needle : {"warm load", "warm-up run", "not included below", "loop throughput", "2000.0 GFLOP/s",
                             "7.000 TFLOP, 50.0% of the GEMM peak 4000.0 GFLOP/s", "per CPU-second", "500.0 GFLOP/s",
                             "50.0% of the peak's 1000.0 per CPU-second"})
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;

  t.run.graph_steps = 3;  // --cuda-graphs: the first of the 4 steps ran directly
  text = rt::format_timing_report(t);
  EXPECT_NE(text.find("CUDA graphs              3 of 4   steps replayed as a recorded graph"), std::string::npos)
      << text;
}

TEST(TimingReport, JsonHasEveryField) {
  rt::TimingReport t = sample_report();
  nlohmann::json j = nlohmann::json::parse(rt::timing_report_json(t));
  for (const char* key : {"fluxrt_version", "model", "variant", "dtype", "device", "width", "height", "images",
                          "threads", "cold_load", "warm_load", "warmup", "run", "total_s", "peak_rss_bytes"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["width"], 64);
  EXPECT_EQ(j["height"], 48);
  EXPECT_TRUE(j["warm_load"].is_null());
  EXPECT_TRUE(j["warmup"].is_null());
  EXPECT_FALSE(j.contains("throughput"));
  EXPECT_DOUBLE_EQ(j["cold_load"]["total_s"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j["cold_load"]["text_encoder_s"].get<double>(), 2.0);
  const nlohmann::json& run = j["run"];
  for (const char* key : {"text_encoding_s", "reference_encode_s", "denoise_total_s", "steps", "ms_per_step",
                          "ms_per_step_min", "ms_per_step_max", "it_per_s", "graph_steps", "vae_decode_s", "load_s",
                          "image_write_s", "total_s"})
    EXPECT_TRUE(run.contains(key)) << key;
  EXPECT_TRUE(run["reference_encode_s"].is_null());
  EXPECT_TRUE(run["graph_steps"].is_null());
  EXPECT_EQ(run["steps"], 4);
  EXPECT_DOUBLE_EQ(run["ms_per_step"].get<double>(), 875.0);
  EXPECT_EQ(j["peak_rss_bytes"].get<size_t>(), size_t{3} << 29);

  t.throughput = sample_throughput("oneDNN");
  t.writes_images = false;  // the benchmark
  t.run.graph_steps = 4;
  j = nlohmann::json::parse(rt::timing_report_json(t));
  EXPECT_EQ(j["run"]["graph_steps"], 4);
  EXPECT_TRUE(j["run"]["image_write_s"].is_null());
  EXPECT_EQ(rt::format_timing_report(t).find("image write"), std::string::npos);
  EXPECT_DOUBLE_EQ(j["throughput"]["peak_ratio"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["throughput"]["loop_tflop"].get<double>(), 7.0);
}

// The peaks `fluxrt bench pipeline` compares the loop with: the GEMM peak as the best of several
// readings with their spread, and the register probe, in the text and in the JSON.
TEST(TimingReport, PeakReadingsAndRegisterPeak) {
  rt::TimingReport t = sample_report();
  rt::LoopThroughput p = sample_throughput("oneDNN f32 matmul 2048^3");
  t.throughput = p;
  // Without readings (an older caller, or --skip-peak): neither line.
  std::string text = rt::format_timing_report(t);
  EXPECT_EQ(text.find("GEMM peak  "), std::string::npos) << text;
  EXPECT_EQ(text.find("register peak"), std::string::npos) << text;

  p.gemm_peak_readings = 3;
  p.gemm_peak_min_gflops = 1500.0;
  p.gemm_peak_taken = "before load/after load/after the run";
  p.register_peak_gflops = 8000.0;
  p.register_peak_min_gflops = 7000.0;
  p.register_peak_per_cpu_s = 4000.0;
  p.register_peak_unit = "AVX2 FMA f32";
  t.throughput = p;
  text = rt::format_timing_report(t);
  for (const char* needle :
       {"7.000 TFLOP, 50.0% of the GEMM peak 4000.0 GFLOP/s", "  GEMM peak           4000.0 GFLOP/s",
        "best of 3 readings [1500.0..4000.0], taken before load/after load/after the run; oneDNN f32 matmul "
        "2048^3",
        "  register peak       8000.0 GFLOP/s", "AVX2 FMA f32 [7000.0..8000.0]; the loop ran at 25.0% of it",
        "12.5% of its 4000.0 per CPU-second"})
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;

  const nlohmann::json j = nlohmann::json::parse(rt::timing_report_json(t));
  const nlohmann::json& q = j["throughput"];
  // The keys that were there before the readings keep their meaning.
  EXPECT_DOUBLE_EQ(q["gemm_peak_gflops"].get<double>(), 4000.0);
  EXPECT_DOUBLE_EQ(q["peak_ratio"].get<double>(), 0.5);
  EXPECT_EQ(q["peak_source"], "oneDNN f32 matmul 2048^3");
  EXPECT_EQ(q["gemm_peak_readings"], 3);
  EXPECT_DOUBLE_EQ(q["gemm_peak_min_gflops"].get<double>(), 1500.0);
  EXPECT_EQ(q["gemm_peak_taken"], "before load/after load/after the run");
  EXPECT_DOUBLE_EQ(q["register_peak_gflops"].get<double>(), 8000.0);
  EXPECT_DOUBLE_EQ(q["register_peak_min_gflops"].get<double>(), 7000.0);
  EXPECT_DOUBLE_EQ(q["register_peak_gflops_per_cpu_s"].get<double>(), 4000.0);
  EXPECT_DOUBLE_EQ(q["register_peak_ratio"].get<double>(), 0.25);
  EXPECT_EQ(q["register_peak_unit"], "AVX2 FMA f32");
}

TEST(TimingReport, AtomicWrite) {
  const fs::path dir = fs::temp_directory_path() / ("fluxrt_atomic_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "profile.json";
  rt::write_file_atomically(file, "first\n");
  rt::write_file_atomically(file, "second\n");
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "second\n");
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1u);  // no temporaries left behind
  EXPECT_THROW(rt::write_file_atomically(dir / "missing" / "x.json", "x"), fluxrt::Error);
  fs::remove_all(dir);
}
