#include <gtest/gtest.h>

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
