#include "core/timer.h"

#include <fmt/format.h>

#include <algorithm>

namespace fluxrt {

void Profiler::add(const std::string& name, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& e : entries_) {
    if (e.name == name) {
      e.total_seconds += seconds;
      e.min_seconds = std::min(e.min_seconds, seconds);
      e.max_seconds = std::max(e.max_seconds, seconds);
      ++e.count;
      return;
    }
  }
  entries_.push_back({name, seconds, 1, seconds, seconds});
}

std::vector<ProfileEntry> Profiler::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_;
}

const ProfileEntry* Profiler::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void Profiler::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

std::string Profiler::table() const {
  auto list = entries();
  size_t width = 8;
  for (const auto& e : list) width = std::max(width, e.name.size());
  std::string out = fmt::format("{:<{}}  {:>6}  {:>10}  {:>10}  {:>10}  {:>10}\n", "stage", width,
                                "calls", "total ms", "mean ms", "min ms", "max ms");
  for (const auto& e : list) {
    out += fmt::format("{:<{}}  {:>6}  {:>10.2f}  {:>10.2f}  {:>10.2f}  {:>10.2f}\n", e.name, width,
                       e.count, e.total_seconds * 1e3, e.total_seconds * 1e3 / e.count,
                       e.min_seconds * 1e3, e.max_seconds * 1e3);
  }
  return out;
}

}  // namespace fluxrt
