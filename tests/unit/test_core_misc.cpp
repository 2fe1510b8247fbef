#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "core/threads.h"
#include "core/timer.h"

namespace fluxrt {

TEST(Error, CarriesCodeAndMessage) {
  try {
    fail(ErrorCode::NotFound, "tensor {} missing in {}", "x.weight", "model.safetensors");
    FAIL() << "fail() returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
    EXPECT_STREQ(e.what(), "tensor x.weight missing in model.safetensors");
  }
  EXPECT_STREQ(error_code_name(ErrorCode::OutOfMemory), "out of memory");
}

TEST(Allocator, AlignedAndCounted) {
  size_t before = host_bytes_in_use();
  void* p = aligned_alloc_bytes(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kTensorAlignment, 0u);
  EXPECT_GE(host_bytes_in_use(), before + 1000);
  EXPECT_GE(host_bytes_peak(), host_bytes_in_use());
  aligned_free(p);
  EXPECT_EQ(host_bytes_in_use(), before);
}

TEST(Allocator, ImpossibleSizeIsOutOfMemory) {
  try {
    aligned_alloc_bytes(size_t(1) << 62);
    FAIL() << "allocation of 4 EiB succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory);
  }
}

TEST(Allocator, LargeFreedBlocksAreReusedAndReleasable) {
  release_cached_host_blocks();
  const size_t bytes = size_t{3} << 20, in_use = host_bytes_in_use();
  void* p = aligned_alloc_bytes(bytes);
  static_cast<char*>(p)[bytes - 1] = 1;  // the block is writable to its end
  aligned_free(p);
  EXPECT_EQ(host_bytes_in_use(), in_use);  // a kept block is not in use
  EXPECT_EQ(host_bytes_cached(), bytes);
  void* q = aligned_alloc_bytes(bytes);  // the same size: the kept block
  EXPECT_EQ(q, p);
  EXPECT_EQ(host_bytes_cached(), 0u);
  EXPECT_EQ(host_bytes_in_use(), in_use + bytes);
  void* r = aligned_alloc_bytes(bytes + 4096);  // another size: a block of its own
  EXPECT_NE(r, q);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r) % kTensorAlignment, 0u);
  aligned_free(q);
  aligned_free(r);
  EXPECT_EQ(host_bytes_cached(), 2 * bytes + 4096);
  EXPECT_EQ(release_cached_host_blocks(), 2 * bytes + 4096);
  EXPECT_EQ(host_bytes_cached(), 0u);
  // Small blocks and over-aligned ones go straight back to the C library.
  aligned_free(aligned_alloc_bytes(1000));
  aligned_free(aligned_alloc_bytes(bytes, 4096));
  EXPECT_EQ(host_bytes_cached(), 0u);
}

TEST(Allocator, TrimKeepsAtMostTheGivenBytes) {
  release_cached_host_blocks();
  const size_t mib = size_t{1} << 20;
  std::vector<void*> blocks;
  for (size_t n : {2, 2, 3, 5}) blocks.push_back(aligned_alloc_bytes(n * mib));
  for (void* p : blocks) aligned_free(p);
  EXPECT_EQ(host_bytes_cached(), 12 * mib);
  const size_t released = trim_cached_host_blocks(6 * mib);
  EXPECT_EQ(released + host_bytes_cached(), 12 * mib);
  EXPECT_LE(host_bytes_cached(), 6 * mib);
  EXPECT_GT(released, 0u);
  EXPECT_EQ(trim_cached_host_blocks(6 * mib), 0u);  // already within: nothing more goes
  EXPECT_EQ(trim_cached_host_blocks(0), 12 * mib - released);
  EXPECT_EQ(host_bytes_cached(), 0u);
}

// The cache holds more than the 1 GiB it once stopped at (on a machine with at least 9 GiB of
// RAM): a 1024x1024 klein step frees ~2 GiB of blocks.
TEST(Allocator, CacheHoldsMoreThanOneGibOnLargeMachines) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0 || static_cast<double>(pages) * page < 9.0 * (1ull << 30))
    GTEST_SKIP() << "less than 9 GiB of RAM: the cache stops at 1 GiB";
  release_cached_host_blocks();
  const size_t block = size_t{600} << 20;  // two of them: more than 1 GiB, reserved but not touched much
  void* a = aligned_alloc_bytes(block);
  void* b = aligned_alloc_bytes(block);
  aligned_free(a);
  aligned_free(b);
  EXPECT_EQ(host_bytes_cached(), 2 * block);
  EXPECT_EQ(release_cached_host_blocks(), 2 * block);
}

// Huge pages are only granted where the system allows them: "never" in the THP setting, or no
// such setting (not Linux), leaves the alignment to check.
bool transparent_huge_pages_allowed() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string setting;
  std::getline(f, setting);
  return !setting.empty() && setting.find("[never]") == std::string::npos;
}

// AnonHugePages of the mapping holding `p`, in kB, from /proc/self/smaps (-1 when not found).
long anon_huge_kb_at(const void* p) {
  std::ifstream f("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      inside = addr >= lo && addr < hi;
      continue;
    }
    long kb = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1) return kb;
  }
  return -1;
}

TEST(Allocator, LargeBlocksStartOnHugePagesAndAskForThem) {
  release_cached_host_blocks();
  const size_t bytes = size_t{8} << 20;
  void* p = aligned_alloc_bytes(bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20), 0u);
  void* small = aligned_alloc_bytes(size_t{3} << 20);  // below 4 MiB: 4 KiB pages, 64-byte alignment
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % kTensorAlignment, 0u);
  if (transparent_huge_pages_allowed()) {
    // Faulted in at allocation after the advice: at least one huge page backs the block (the
    // kernel may fall back to small pages when memory is fragmented, not for all of 8 MiB).
    EXPECT_GE(anon_huge_kb_at(p), 2048) << "no huge page behind an 8 MiB block";
  }
  advise_huge_pages(small, 100);  // a range without a whole huge page: nothing to do
  aligned_free(p);
  aligned_free(small);
  release_cached_host_blocks();
}

TEST(Allocator, ReportsRss) { EXPECT_GT(process_peak_rss_bytes(), 0u); }

TEST(Threads, SetAndGet) {
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(0);
  EXPECT_EQ(num_threads(), hardware_threads());
}

TEST(Device, Parse) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("cuda:3").str(), "cuda:3");
  EXPECT_THROW(Device::parse("tpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
}

TEST(Log, ParseLevels) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::Debug);
  EXPECT_THROW(parse_log_level("loud"), Error);
}

TEST(Profiler, AccumulatesInOrder) {
  Profiler p;
  p.add("load", 0.5);
  p.add("step", 0.1);
  p.add("step", 0.3);
  {
    ScopedTimer t(&p, "decode");
  }
  auto e = p.entries();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].name, "load");
  EXPECT_EQ(e[1].count, 2);
  EXPECT_DOUBLE_EQ(e[1].total_seconds, 0.4);
  EXPECT_DOUBLE_EQ(e[1].min_seconds, 0.1);
  EXPECT_DOUBLE_EQ(e[1].max_seconds, 0.3);
  EXPECT_EQ(e[2].name, "decode");
  EXPECT_NE(p.table().find("step"), std::string::npos);
}

}  // namespace fluxrt
