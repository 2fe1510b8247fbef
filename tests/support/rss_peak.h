#pragma once
// The process's resident-memory high-water mark over one call, for memory tests that must see what
// the tensor allocator does not (oneDNN's blocked copies, its scratchpads). Linux only: the peak
// (VmHWM) is reset through /proc/self/clear_refs, and large blocks are made to come from mmap so
// that freed memory leaves the process instead of staying in malloc's heap. Returns 0 where the
// reset is not possible (the caller should then skip its check).
#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace fluxrt::test {

inline size_t proc_status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0) return std::stoul(line.substr(n));
  return 0;
}

// Bytes by which the resident set grew at its highest during fn(), above the resident set before.
template <typename Fn>
size_t rss_peak_during(Fn&& fn) {
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);  // fixed: no dynamic threshold keeping freed blocks in the heap
  malloc_trim(0);
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return 0;
  const bool reset = std::fputs("5", f) >= 0;
  if (std::fclose(f) != 0 || !reset) return 0;
  const size_t base = proc_status_kib("VmRSS:");
  fn();
  const size_t peak = proc_status_kib("VmHWM:");
  return peak > base ? (peak - base) * 1024 : 0;
}

}  // namespace fluxrt::test
