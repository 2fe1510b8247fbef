#include "runtime/timing_report.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fluxrt/version.h"
#include "pipelines/spans.h"

namespace fluxrt {
namespace fs = std::filesystem;
namespace pl = fluxrt::pipelines;

namespace {

double span_total(const std::vector<ProfileEntry>& entries, const char* name) {
  for (const ProfileEntry& e : entries)
    if (e.name == name) return e.total_seconds;
  return 0;
}

const ProfileEntry* span(const std::vector<ProfileEntry>& entries, const char* name) {
  for (const ProfileEntry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

std::string ms(double seconds) { return fmt::format("{:10.1f} ms", seconds * 1e3); }

std::string line(const std::string& label, const std::string& value, const std::string& detail = "") {
  return fmt::format("  {:<20}{}{}\n", label, value, detail.empty() ? "" : "   " + detail);
}

std::string load_detail(const LoadTimings& l) {
  return fmt::format("transformer {:.1f}, text encoder {:.1f}, VAE {:.1f} ms", l.transformer_s * 1e3,
                     l.text_encoder_s * 1e3, l.vae_s * 1e3);
}

std::string gib(size_t bytes) { return fmt::format("{:10.2f} GiB", static_cast<double>(bytes) / (1 << 30)); }

// The peaks the loop is compared with: how many readings, their spread, and the register probe.
std::string peak_lines(const LoopThroughput& p) {
  std::string out;
  if (p.gemm_peak_gflops > 0 && p.gemm_peak_readings > 0)
    out += line("  GEMM peak", fmt::format("{:8.1f} GFLOP/s", p.gemm_peak_gflops),
                fmt::format("best of {} reading{} [{:.1f}..{:.1f}], taken {}; {}", p.gemm_peak_readings,
                            p.gemm_peak_readings == 1 ? "" : "s", p.gemm_peak_min_gflops, p.gemm_peak_gflops,
                            p.gemm_peak_taken, p.peak_source));
  if (p.register_peak_gflops > 0) {
    std::string detail = fmt::format("{} [{:.1f}..{:.1f}]; the loop ran at {:.1f}% of it",
                                     p.register_peak_unit, p.register_peak_min_gflops, p.register_peak_gflops,
                                     100.0 * p.gflops / p.register_peak_gflops);
    if (p.gflops_per_cpu_s > 0 && p.register_peak_per_cpu_s > 0)
      detail +=
          fmt::format(", {:.1f}% of its {:.1f} per CPU-second",
                      100.0 * p.gflops_per_cpu_s / p.register_peak_per_cpu_s, p.register_peak_per_cpu_s);
    out += line("  register peak", fmt::format("{:8.1f} GFLOP/s", p.register_peak_gflops), detail);
  }
  return out;
}

nlohmann::ordered_json load_json(const std::optional<LoadTimings>& l) {
  if (!l) return nullptr;
  return {{"total_s", l->total_s},
          {"transformer_s", l->transformer_s},
          {"text_encoder_s", l->text_encoder_s},
          {"vae_s", l->vae_s}};
}

nlohmann::ordered_json run_json(const RunTimings& r) {
  auto optional_s = [](double s) { return s > 0 ? nlohmann::ordered_json(s) : nlohmann::ordered_json(nullptr); };
  nlohmann::ordered_json j = {
      {"text_encoding_s", r.text_encoding_s},
      {"clip_encoding_s", optional_s(r.clip_encoding_s)},
      {"t5_encoding_s", optional_s(r.t5_encoding_s)},
      {"reference_encode_s", r.has_reference_images ? nlohmann::ordered_json(r.reference_encode_s) : nullptr},
      {"reference_images", r.reference_images},
      {"reference_images_cached", r.reference_images_cached},
      {"reference_kv_s", r.reference_kv_bytes > 0 ? nlohmann::ordered_json(r.reference_kv_s) : nullptr},
      {"reference_kv_bytes", r.reference_kv_bytes},
      {"kernel_planning_s", r.kernel_planning_s},
      {"denoise_total_s", r.denoise_total_s},
      {"steps", r.steps},
      {"ms_per_step", r.ms_per_step()},
      {"ms_per_step_min", r.step_min_s * 1e3},
      {"ms_per_step_max", r.step_max_s * 1e3},
      {"it_per_s", r.steps_per_second()},
      {"graph_steps", r.graph_steps ? nlohmann::ordered_json(*r.graph_steps) : nullptr},
      {"cache_steps",
       r.cache_steps.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.cache_steps)},
      {"vae_decode_s", r.vae_decode_s},
      {"load_s", r.load_s},
      {"load_detail", r.load_s > 0 ? load_json(r.loads) : nlohmann::ordered_json(nullptr)},
      {"image_write_s", r.image_write_s},
      {"total_s", r.total_s}};
  return j;
}

}  // namespace

std::string format_timing_report(const TimingReport& t) {
  std::string out = fmt::format("timing: {} ({}), {}x{}, {} image{}, {} step{}, {}, {}, {} thread{}\n", t.model,
                                t.variant, t.width, t.height, t.images, t.images == 1 ? "" : "s", t.run.steps,
                                t.run.steps == 1 ? "" : "s", t.dtype, t.device, t.threads, t.threads == 1 ? "" : "s");
  if (t.cold_load) out += line("cold load", ms(t.cold_load->total_s), load_detail(*t.cold_load));
  if (t.warm_load) out += line("warm load", ms(t.warm_load->total_s), load_detail(*t.warm_load));
  if (t.warmup)
    out += line("warm-up run", ms(t.warmup->total_s),
                fmt::format("{:.1f} ms/step, not included below", t.warmup->ms_per_step()));
  const RunTimings& r = t.run;
  if (r.load_s > 0)
    out += line("load (in run)", ms(r.load_s), load_detail(r.loads) + "; components loaded by the request");
  std::string text_detail;
  if (r.clip_encoding_s > 0 || r.t5_encoding_s > 0)
    text_detail = fmt::format("CLIP {:.1f}, T5 {:.1f} ms", r.clip_encoding_s * 1e3, r.t5_encoding_s * 1e3);
  out += line("text encoding", ms(r.text_encoding_s), text_detail);
  std::string reference_detail;
  if (r.reference_images > 0)
    reference_detail = fmt::format("{} image{}, {} from the reference cache", r.reference_images,
                                   r.reference_images == 1 ? "" : "s", r.reference_images_cached);
  out +=
      line("reference encoding",
           r.has_reference_images ? ms(r.reference_encode_s) : fmt::format("{:>13}", "-"), reference_detail);
  if (r.reference_kv_bytes > 0)
    out += line("reference K/V", ms(r.reference_kv_s),
                fmt::format("keys and values of every attention, {:.1f} MiB, freed after the request",
                            static_cast<double>(r.reference_kv_bytes) / (1 << 20)));
  if (r.kernel_planning_s > 0)
    out += line("kernel planning", ms(r.kernel_planning_s),
                "one-time work for these shapes, before the first step");
  out += line("denoising loop", ms(r.denoise_total_s),
              fmt::format("{:.1f} ms/step (min {:.1f}, max {:.1f}), {:.2f} it/s", r.ms_per_step(), r.step_min_s * 1e3,
                          r.step_max_s * 1e3, r.steps_per_second()));
  if (r.graph_steps)
    out += line("  CUDA graphs", fmt::format("{:>13}", fmt::format("{} of {}", *r.graph_steps, r.steps)),
                "steps replayed as a recorded graph");
  if (!r.cache_steps.empty()) {
    const auto full = std::count(r.cache_steps.begin(), r.cache_steps.end(), 'F');
    out += line(
        "  step cache",
        fmt::format("{:>13}", fmt::format("{} of {}", r.cache_steps.size() - full, r.cache_steps.size())),
        fmt::format("steps reused the cache: {} (F full, C cached, P per CFG branch)", r.cache_steps));
  }
  if (t.throughput) {
    const LoopThroughput& p = *t.throughput;
    std::string detail = fmt::format("{:.3f} TFLOP", p.flop / 1e12);
    if (p.steps_counted > 0)
      detail += fmt::format(" of the {} step{} run fully (cached steps not counted)", p.steps_counted,
                            p.steps_counted == 1 ? "" : "s");
    if (p.gemm_peak_gflops > 0)
      detail += fmt::format(", {:.1f}% of the GEMM peak {:.1f} GFLOP/s", 100.0 * p.gflops / p.gemm_peak_gflops,
                            p.gemm_peak_gflops);
    out += line("loop throughput", fmt::format("{:8.1f} GFLOP/s", p.gflops), detail);
    if (p.gflops_per_cpu_s > 0) {
      std::string cpu_detail = "robust on a shared machine";
      if (p.gemm_peak_per_cpu_s > 0)
        cpu_detail = fmt::format("{:.1f}% of the peak's {:.1f} per CPU-second; ", 100.0 * p.gflops_per_cpu_s / p.gemm_peak_per_cpu_s,
                                 p.gemm_peak_per_cpu_s) + cpu_detail;
      out += line("  per CPU-second", fmt::format("{:8.1f} GFLOP/s", p.gflops_per_cpu_s), cpu_detail);
    }
    out += peak_lines(p);
  }
  out += line("VAE decode", ms(r.vae_decode_s));
  if (t.writes_images) out += line("image write", ms(r.image_write_s));
  out += line("run total", ms(r.total_s));
  out += line("total", ms(t.total_s), "the whole command");
  out += line("peak RSS", gib(t.peak_rss_bytes));
  return out;
}

std::string timing_report_json(const TimingReport& t) {
  nlohmann::ordered_json j = {{"fluxrt_version", FLUXRT_VERSION_STRING},
                      {"model", t.model},
                      {"variant", t.variant},
                      {"dtype", t.dtype},
                      {"device", t.device},
                      {"width", t.width},
                      {"height", t.height},
                      {"images", t.images},
                      {"threads", t.threads},
                      {"cold_load", load_json(t.cold_load)},
                      {"warm_load", load_json(t.warm_load)},
                      {"warmup", t.warmup ? run_json(*t.warmup) : nlohmann::ordered_json(nullptr)},
                      {"run", run_json(t.run)},
                      {"total_s", t.total_s},
                      {"peak_rss_bytes", t.peak_rss_bytes}};
  if (!t.writes_images) j["run"]["image_write_s"] = nullptr;
  if (t.throughput) {
    const LoopThroughput& p = *t.throughput;
    j["throughput"] = {
        {"loop_tflop", p.flop / 1e12},
        {"gflops", p.gflops},
        {"steps_counted", p.steps_counted},
        {"gflops_per_cpu_s", p.gflops_per_cpu_s},
        {"gemm_peak_gflops", p.gemm_peak_gflops},
        {"gemm_peak_gflops_per_cpu_s", p.gemm_peak_per_cpu_s},
        {"peak_ratio", p.gemm_peak_gflops > 0 ? p.gflops / p.gemm_peak_gflops : 0.0},
        {"peak_source", p.peak_source},
        {"gemm_peak_readings", p.gemm_peak_readings},
        {"gemm_peak_min_gflops", p.gemm_peak_min_gflops},
        {"gemm_peak_taken", p.gemm_peak_taken},
        {"register_peak_gflops", p.register_peak_gflops},
        {"register_peak_min_gflops", p.register_peak_min_gflops},
        {"register_peak_gflops_per_cpu_s", p.register_peak_per_cpu_s},
        {"register_peak_ratio", p.register_peak_gflops > 0 ? p.gflops / p.register_peak_gflops : 0.0},
        {"register_peak_unit", p.register_peak_unit}};
  }
  return j.dump(2) + "\n";
}

namespace runtime {

LoadTimings load_timings_from(const Profiler& profiler) {
  const std::vector<ProfileEntry> entries = profiler.entries();
  LoadTimings l;
  l.transformer_s = span_total(entries, pl::kSpanLoadTransformer);
  l.text_encoder_s = span_total(entries, pl::kSpanLoadTextEncoder);
  l.vae_s = span_total(entries, pl::kSpanLoadVae);
  l.total_s = span_total(entries, pl::kSpanLoadTotal);
  if (l.total_s == 0) l.total_s = l.transformer_s + l.text_encoder_s + l.vae_s;  // sequential loads
  return l;
}

RunTimings run_timings_from(const Profiler& profiler) {
  const std::vector<ProfileEntry> entries = profiler.entries();
  RunTimings r;
  r.text_encoding_s = span_total(entries, pl::kSpanTextEncoding);
  r.clip_encoding_s = span_total(entries, pl::kSpanTextEncodingClip);
  r.t5_encoding_s = span_total(entries, pl::kSpanTextEncodingT5);
  if (const ProfileEntry* e = span(entries, pl::kSpanReferenceEncode)) {
    r.has_reference_images = true;
    r.reference_encode_s = e->total_seconds;
  }
  r.reference_kv_s = span_total(entries, pl::kSpanReferenceKv);
  if (const ProfileEntry* e = span(entries, pl::kSpanDenoiseStep)) {
    r.steps = e->count;
    r.step_min_s = e->min_seconds;
    r.step_max_s = e->max_seconds;
  }
  r.kernel_planning_s = span_total(entries, pl::kSpanKernelPlanning);
  r.denoise_total_s = span_total(entries, pl::kSpanDenoiseTotal);
  r.vae_decode_s = span_total(entries, pl::kSpanVaeDecode);
  const LoadTimings in_run = load_timings_from(profiler);
  r.load_s = in_run.total_s;
  r.loads = in_run;
  return r;
}

void write_file_atomically(const fs::path& path, const std::string& contents) {
  static std::atomic<unsigned> counter{0};
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const fs::path tmp = dir / fmt::format(".{}.tmp-{}-{}", path.filename().string(), static_cast<long>(::getpid()),
                                         counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  FLUXRT_CHECK(fd >= 0, ErrorCode::Io, "cannot write {}: {}", path.string(), std::strerror(errno));
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(ErrorCode::Io, "cannot write {}: {}", path.string(), std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(ErrorCode::Io, "cannot write {}: {}", path.string(), std::strerror(err));
  }
}

}  // namespace runtime
}  // namespace fluxrt
