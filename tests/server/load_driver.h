#pragma once
// The load tests' client side: `requests` generation requests from `clients` threads against one
// server, mixed sizes (32, 48, 64 square and 64x32), one in five streamed, one in ten cancelled
// midway (the client closes its connection 5-25 ms in).
// Counts what failed: a finished request that is not a 200 with its images, or a cancelled one
// that the server did not survive.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "server_fixture.h"

namespace fluxrt::test {

struct LoadResult {
  int ok = 0, cancelled = 0, failed = 0;
  std::vector<double> latencies_s;  // of the completed, non-cancelled requests
  // The slowest non-streamed request: its latency here and the server's Server-Timing header
  // (queue and generate time), which tells a long queue from time lost outside the server.
  double slowest_s = 0;
  std::string slowest_server_timing;
  double wall_s = 0;
  std::vector<std::string> failures;  // the first few, for the message

  double percentile(double p) const {
    if (latencies_s.empty()) return 0;
    std::vector<double> v = latencies_s;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
  }
};

inline LoadResult run_load(int port, int requests, int clients, int steps) {
  LoadResult total;
  std::mutex mutex;
  std::atomic<int> next{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t)
    threads.emplace_back([&] {
      for (int i; (i = next++) < requests;) {
        static const char* kSizes[] = {"32x32", "48x48", "64x64", "64x32"};
        const bool stream = i % 5 == 1, cancel = i % 10 == 3;
        nlohmann::json body = {{"prompt", "a red circle on a blue background"},
                               {"size", kSizes[i % 4]},
                               {"seed", i},
                               {"num_inference_steps", steps},
                               {"stream", stream}};
        auto client = client_for(port);
        // A request may wait behind 15 others, and on an oversubscribed machine (4 busy loops on 2
        // cores) one 1-step job took up to 11.5 s against 0.12 s quiet: the wait then passes
        // client_for's 120 s while the server is working as it should. A hung server still
        // fails here, well inside ctest's timeout.
        client->set_read_timeout(600, 0);
        const auto t0 = std::chrono::steady_clock::now();
        std::string error;
        bool ok = false;
        if (cancel) {
          // Streamed or not, the client closes its connection a few milliseconds in.
          std::thread closer([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(5 + i % 20));
            client->stop();
          });
          client->Post("/v1/images/generations", body.dump(), "application/json");
          closer.join();
          std::lock_guard<std::mutex> lock(mutex);
          ++total.cancelled;
          continue;
        }
        auto r = client->Post("/v1/images/generations", body.dump(), "application/json");
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!r) {
          error = "no answer: " + httplib::to_string(r.error());
        } else if (r->status != 200) {
          error = std::to_string(r->status) + " " + r->body.substr(0, 200);
        } else if (stream) {
          const auto events = sse_events(r->body);
          ok = !events.empty() && events.back().first == "image_generation.completed" &&
               int(events.size()) == steps + 1;
          if (!ok) error = "stream: " + r->body.substr(0, 200);
        } else {
          const nlohmann::json j = json_of(r);
          ok = j.is_object() && j["data"].size() == 1 && !j["data"][0]["b64_json"].get<std::string>().empty();
          if (!ok) error = "body: " + r->body.substr(0, 200);
        }
        std::lock_guard<std::mutex> lock(mutex);
        if (ok) {
          ++total.ok;
          total.latencies_s.push_back(s);
          if (!stream && s > total.slowest_s) {
            total.slowest_s = s;
            total.slowest_server_timing = r->get_header_value("Server-Timing");
          }
        } else {
          ++total.failed;
          // Which request and after how long: a client timeout (120 s) reads differently from a
          // connection the server dropped at once.
          if (total.failures.size() < 5)
            total.failures.push_back("request " + std::to_string(i) + (stream ? " (streamed)" : "") +
                                     " after " + std::to_string(s) + " s: " + error);
        }
      }
    });
  for (auto& t : threads) t.join();
  total.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return total;
}

}  // namespace fluxrt::test
