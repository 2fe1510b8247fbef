#include "core/allocator.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace fluxrt {
namespace {

std::atomic<size_t> g_in_use{0};
std::atomic<size_t> g_peak{0};
struct Block {
  size_t bytes = 0;
  bool cacheable = false;  // kTensorAlignment-aligned and large enough for the block cache
};
std::mutex g_sizes_mutex;
std::unordered_map<void*, Block>& sizes() {
  static std::unordered_map<void*, Block> map;
  return map;
}

// Freed blocks of at least kCachedMinBytes are kept, by size, for the next allocation of that
// size, up to cache_cap_bytes() in all. A forward allocates and frees the same activation sizes
// in every block; from the OS each such block (above glibc's 32 MiB mmap ceiling, or trimmed)
// comes back as fresh pages, which the kernel faults in and zeroes at every use: on a 2-core AMX
// Xeon that was 6% of a klein step.
constexpr size_t kCachedMinBytes = size_t{1} << 20;

// The cap is an eighth of the machine's RAM, at least 1 GiB and at most 4 GiB. A fixed 1 GiB
// held a klein-4B step's blocks up to 512x512 but not at 1024x1024 (activations of 28-255 MB
// each): there 2.7 s of a 45 s step went to faulting fresh pages in, 0.06 s with 2 GiB, and the
// peak RSS stayed 8.74 GiB (Zen5, 2 threads, `fluxrt bench transformer --size 1024x1024
// --op-times`). The cache only keeps blocks a step had in use, so an eighth of RAM stays out of
// the way of the model's weights on a small machine.
size_t cache_cap_bytes() {
  static const size_t cap = [] {
    constexpr size_t kMin = size_t{1} << 30, kMax = size_t{4} << 30;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return kMin;
    const size_t ram = static_cast<size_t>(pages) * static_cast<size_t>(page);
    return std::min(std::max(ram / 8, kMin), kMax);
  }();
  return cap;
}

// Blocks of at least this size start on a huge-page boundary and are advised to use huge pages:
// on the AMX Xeon (THP "madvise") a klein-4B step at 256x256 took 4606 ms with 4 KiB pages and
// 4511 ms with THP forced on for every allocation (4409-4539 ms with this advice). Smaller blocks
// keep 4 KiB pages, where a huge page would be mostly empty.
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugeMinBytes = size_t{4} << 20;

struct BlockCache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // by rounded size
  size_t bytes = 0;
};
BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache;  // never destroyed: frees may come from static dtors
  return *cache;
}

void* take_cached(size_t rounded) {
  BlockCache& c = block_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.free_blocks.find(rounded);
  if (it == c.free_blocks.end() || it->second.empty()) return nullptr;
  void* ptr = it->second.back();
  it->second.pop_back();
  c.bytes -= rounded;
  return ptr;
}

// Whether the block went into the cache (else the caller frees it).
bool put_cached(void* ptr, size_t rounded) {
  BlockCache& c = block_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.bytes + rounded > cache_cap_bytes()) return false;
  c.free_blocks[rounded].push_back(ptr);
  c.bytes += rounded;
  return true;
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
  const bool cacheable = rounded >= kCachedMinBytes && alignment <= kTensorAlignment;
  const bool huge = cacheable && rounded >= kHugeMinBytes;
  // Kept blocks of one size have one alignment, so any of them serves any request it is kept for.
  const size_t block_alignment = huge ? kHugePageBytes : cacheable ? kTensorAlignment : alignment;
  void* ptr = cacheable ? take_cached(rounded) : nullptr;
  const bool fresh = ptr == nullptr;
  if (!ptr && posix_memalign(&ptr, block_alignment, rounded) != 0) ptr = nullptr;
  if (!ptr && release_cached_host_blocks() > 0 && posix_memalign(&ptr, block_alignment, rounded) != 0)
    ptr = nullptr;
  if (ptr == nullptr) {
    fail(ErrorCode::OutOfMemory, "out of host memory: could not allocate {} bytes ({:.2f} GiB)",
         bytes, static_cast<double>(bytes) / (1ull << 30));
  }
  // A new large block is faulted in here, where the first writer would fault it anyway: so a
  // forward's kernel planning pass (which allocates every activation and writes none) takes that
  // one-time work out of the first step.
  if (cacheable && fresh) {
    if (huge) advise_huge_pages(ptr, rounded);
    volatile char* page = static_cast<char*>(ptr);
    for (size_t off = 0; off < rounded; off += 4096) page[off] = 0;
  }
  {
    std::lock_guard<std::mutex> lock(g_sizes_mutex);
    sizes()[ptr] = Block{rounded, cacheable};
  }
  note_alloc(rounded);
  return ptr;
}

void aligned_free(void* ptr) {
  if (!ptr) return;
  Block block;
  {
    std::lock_guard<std::mutex> lock(g_sizes_mutex);
    auto it = sizes().find(ptr);
    if (it != sizes().end()) {
      block = it->second;
      sizes().erase(it);
    }
  }
  g_in_use.fetch_sub(block.bytes);
  if (block.cacheable && put_cached(ptr, block.bytes)) return;
  std::free(ptr);
}

void advise_huge_pages(void* ptr, size_t bytes) {
#ifdef MADV_HUGEPAGE
  const auto begin = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t first = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uintptr_t last = (begin + bytes) / kHugePageBytes * kHugePageBytes;
  if (last > first) (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)ptr;
  (void)bytes;
#endif
}

size_t release_cached_host_blocks() { return trim_cached_host_blocks(0); }

size_t trim_cached_host_blocks(size_t keep_bytes) {
  BlockCache& c = block_cache();
  std::vector<void*> freed;
  size_t released = 0;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    for (auto it = c.free_blocks.begin(); it != c.free_blocks.end() && c.bytes > keep_bytes;) {
      std::vector<void*>& list = it->second;
      while (!list.empty() && c.bytes > keep_bytes) {
        freed.push_back(list.back());
        list.pop_back();
        c.bytes -= it->first;
        released += it->first;
      }
      it = list.empty() ? c.free_blocks.erase(it) : std::next(it);
    }
  }
  for (void* p : freed) std::free(p);
  return released;
}

size_t host_bytes_cached() {
  BlockCache& c = block_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.bytes;
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
