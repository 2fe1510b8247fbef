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
