#pragma once
// GET /metrics in Prometheus' text format (version 0.0.4): the HTTP side's own counter (requests
// by endpoint and status) and the scheduler's counters (queue depth, running and cancelled
// requests, images, denoising steps and their rate, the request latency and batch size
// histograms, fluxrt::SchedulerStats), with the resident and peak memory.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "fluxrt/scheduler.h"

namespace fluxrt::server {

// Requests answered, by endpoint and status. Thread-safe.
class HttpMetrics {
 public:
  void count_request(const std::string& endpoint, int status);
  std::map<std::pair<std::string, int>, uint64_t> requests() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
};

std::string metrics_text(const HttpMetrics& http, const SchedulerStats& scheduler);

// The process's resident set now and at its highest (bytes), from /proc/self/status.
size_t resident_bytes();
size_t peak_resident_bytes();

}  // namespace fluxrt::server
