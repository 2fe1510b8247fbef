#pragma once
// Images kept for `response_format: url` (GET /v1/images/{id}/content): each for at most `ttl`
// and at most `capacity` of them, the oldest going first, so a client that never fetches cannot
// grow the server. Ids are 128 random bits: unguessable, and never a path.
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <string>

namespace fluxrt::server {

class ImageStore {
 public:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string id, content_type, bytes;
    Clock::time_point created;
  };

  ImageStore(std::chrono::seconds ttl, size_t capacity) : ttl_(ttl), capacity_(capacity) {}

  std::string put(std::string bytes, std::string content_type) {
    std::lock_guard<std::mutex> lock(mutex_);
    expire();
    char id[33];
    std::snprintf(id, sizeof id, "%016llx%016llx", (unsigned long long)random_(),
                  (unsigned long long)random_());
    entries_.push_back({id, std::move(content_type), std::move(bytes), Clock::now()});
    while (entries_.size() > capacity_) entries_.pop_front();
    return id;
  }

  std::optional<Entry> get(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    expire();
    for (const Entry& e : entries_)
      if (e.id == id) return e;
    return std::nullopt;
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    expire();
    return entries_.size();
  }

 private:
  void expire() {
    const auto now = Clock::now();
    while (!entries_.empty() && now - entries_.front().created > ttl_) entries_.pop_front();
  }

  const std::chrono::seconds ttl_;
  const size_t capacity_;
  std::mutex mutex_;
  std::deque<Entry> entries_;
  std::mt19937_64 random_{std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32)};
};

}  // namespace fluxrt::server
