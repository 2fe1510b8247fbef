#pragma once
// The server's counters for GET /metrics, in Prometheus' text format (version 0.0.4): queue depth,
// requests by endpoint and status, images, denoising steps and their rate, request latency and
// batch size histograms, resident and peak memory. Every method is thread-safe.
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace fluxrt::server {

class Metrics {
 public:
  void count_request(const std::string& endpoint, int status);
  void observe_latency(double seconds);  // a generation request, queued to answered
  void observe_batch(int images);
  void observe_step(double seconds);
  void add_images(int n) { images_ += n; }
  void count_cancelled() { ++cancelled_; }
  void set_queue_depth(int n) { queue_depth_ = n; }
  void set_running(int n) { running_ = n; }

  std::string text() const;

  static constexpr std::array<double, 12> kLatencyBuckets{0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                                          5,    10,  30,   60,  120, 300};

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::array<uint64_t, kLatencyBuckets.size()> latency_buckets_{};
  uint64_t latency_count_ = 0;
  double latency_sum_ = 0;
  std::map<int, uint64_t> batches_;
  uint64_t steps_ = 0;
  double step_seconds_ = 0;
  double last_step_s_ = 0;
  std::atomic<uint64_t> images_{0}, cancelled_{0};
  std::atomic<int> queue_depth_{0}, running_{0};
};

// The process's resident set now and at its highest (bytes), from /proc/self/status.
size_t resident_bytes();
size_t peak_resident_bytes();

}  // namespace fluxrt::server
