#pragma once
// Wall-clock timing for the per-component report (load, text encoding, steps, VAE decode, ...).
// A Profiler collects named spans; ScopedTimer adds one when it goes out of scope.
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace fluxrt {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double ms() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

struct ProfileEntry {
  std::string name;
  double total_seconds = 0;
  int count = 0;
  double min_seconds = 0;
  double max_seconds = 0;
};

class Profiler {
 public:
  // Thread-safe; entries keep the order in which names were first seen.
  void add(const std::string& name, double seconds);
  std::vector<ProfileEntry> entries() const;
  const ProfileEntry* find(const std::string& name) const;  // not thread-safe against add()
  void clear();
  // A fixed-width table: name, calls, total ms, mean ms, min, max.
  std::string table() const;

 private:
  mutable std::mutex mutex_;
  std::vector<ProfileEntry> entries_;
};

class ScopedTimer {
 public:
  ScopedTimer(Profiler* profiler, std::string name) : profiler_(profiler), name_(std::move(name)) {}
  ~ScopedTimer() {
    if (profiler_) profiler_->add(name_, watch_.seconds());
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Profiler* profiler_;
  std::string name_;
  Stopwatch watch_;
};

}  // namespace fluxrt
