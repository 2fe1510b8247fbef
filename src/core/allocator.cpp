#include "core/allocator.h"

#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace fluxrt {
namespace {

std::atomic<size_t> g_in_use{0};
std::atomic<size_t> g_peak{0};
std::mutex g_sizes_mutex;
std::unordered_map<void*, size_t>& sizes() {
  static std::unordered_map<void*, size_t> map;
  return map;
}

void note_alloc(size_t bytes) {
  size_t now = g_in_use.fetch_add(bytes) + bytes;
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

void* aligned_alloc_bytes(size_t bytes, size_t alignment) {
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  if (rounded == 0) rounded = alignment;
  void* ptr = nullptr;
  if (posix_memalign(&ptr, alignment, rounded) != 0 || ptr == nullptr) {
    fail(ErrorCode::OutOfMemory, "out of host memory: could not allocate {} bytes ({:.2f} GiB)",
         bytes, static_cast<double>(bytes) / (1ull << 30));
  }
  {
    std::lock_guard<std::mutex> lock(g_sizes_mutex);
    sizes()[ptr] = rounded;
  }
  note_alloc(rounded);
  return ptr;
}

void aligned_free(void* ptr) {
  if (!ptr) return;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_sizes_mutex);
    auto it = sizes().find(ptr);
    if (it != sizes().end()) {
      bytes = it->second;
      sizes().erase(it);
    }
  }
  g_in_use.fetch_sub(bytes);
  std::free(ptr);
}

size_t host_bytes_in_use() { return g_in_use.load(); }
size_t host_bytes_peak() { return g_peak.load(); }
void reset_host_bytes_peak() { g_peak.store(g_in_use.load()); }

size_t process_peak_rss_bytes() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<size_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

size_t process_current_rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long pages_total = 0, pages_resident = 0;
  int n = std::fscanf(f, "%lu %lu", &pages_total, &pages_resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<size_t>(pages_resident) * 4096;
}

}  // namespace fluxrt
