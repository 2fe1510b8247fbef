#include "metrics.h"

#include <cstdio>
#include <cstring>
#include <fstream>

namespace fluxrt::server {
namespace {

size_t status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  const size_t n = std::strlen(key);
  for (std::string line; std::getline(f, line);)
    if (line.compare(0, n, key) == 0) return std::strtoull(line.c_str() + n, nullptr, 10);
  return 0;
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

size_t resident_bytes() { return status_kib("VmRSS:") * 1024; }
size_t peak_resident_bytes() { return status_kib("VmHWM:") * 1024; }

void HttpMetrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
}

std::map<std::pair<std::string, int>, uint64_t> HttpMetrics::requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return requests_;
}

std::string metrics_text(const HttpMetrics& http, const SchedulerStats& s) {
  std::string out;
  auto head = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  head("fluxrt_queue_depth", "gauge", "Requests waiting for the engine.");
  out += "fluxrt_queue_depth " + std::to_string(s.queued) + "\n";
  head("fluxrt_running_requests", "gauge", "Requests the engine is running now.");
  out += "fluxrt_running_requests " + std::to_string(s.running) + "\n";
  head("fluxrt_http_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (const auto& [key, n] : http.requests())
    out += "fluxrt_http_requests_total{endpoint=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  head("fluxrt_images_generated_total", "counter", "Images returned to clients.");
  out += "fluxrt_images_generated_total " + std::to_string(s.images) + "\n";
  head("fluxrt_requests_cancelled_total", "counter", "Generation requests whose client went away.");
  out += "fluxrt_requests_cancelled_total " + std::to_string(s.cancelled) + "\n";
  head("fluxrt_denoise_steps_total", "counter", "Denoising steps run (one per batch step).");
  out += "fluxrt_denoise_steps_total " + std::to_string(s.steps) + "\n";
  head("fluxrt_denoise_seconds_total", "counter", "Seconds spent in denoising steps.");
  out += "fluxrt_denoise_seconds_total " + number(s.step_seconds) + "\n";
  head("fluxrt_steps_per_second", "gauge", "The last denoising step's rate.");
  out += "fluxrt_steps_per_second " + number(s.last_step_seconds > 0 ? 1 / s.last_step_seconds : 0) + "\n";
  head("fluxrt_request_duration_seconds", "histogram", "Generation requests, queued to done.");
  for (size_t i = 0; i < s.latency_bounds.size() && i < s.latency_counts.size(); ++i)
    out += "fluxrt_request_duration_seconds_bucket{le=\"" + number(s.latency_bounds[i]) + "\"} " +
           std::to_string(s.latency_counts[i]) + "\n";
  out += "fluxrt_request_duration_seconds_bucket{le=\"+Inf\"} " + std::to_string(s.latency_count) + "\n";
  out += "fluxrt_request_duration_seconds_sum " + number(s.latency_sum) + "\n";
  out += "fluxrt_request_duration_seconds_count " + std::to_string(s.latency_count) + "\n";
  head("fluxrt_batches_total", "counter", "Engine calls, by the images they ran together.");
  for (const auto& [size, n] : s.batches)
    out += "fluxrt_batches_total{images=\"" + std::to_string(size) + "\"} " + std::to_string(n) + "\n";
  head("fluxrt_resident_memory_bytes", "gauge", "Resident set size now.");
  out += "fluxrt_resident_memory_bytes " + std::to_string(resident_bytes()) + "\n";
  head("fluxrt_peak_resident_memory_bytes", "gauge", "Resident set size at its highest.");
  out += "fluxrt_peak_resident_memory_bytes " + std::to_string(peak_resident_bytes()) + "\n";
  return out;
}

}  // namespace fluxrt::server
