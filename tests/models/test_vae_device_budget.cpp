// The VAE's automatic tiling budget and its fit check read the free memory of the VAE's own device
// (core/memory_info.h device_free_bytes): host MemAvailable for cpu and cpu:N, the GPU's free memory
// for cuda:N through the backend's memory hooks. Without a GPU, a CPU-only build stands in a fake
// CUDA memory backend that reports a fixed free size, so the plumbing is checked on any machine.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda_backend.h"
#include "core/device_memory.h"
#include "core/error.h"
#include "core/memory_info.h"
#include "models/vae/flux1_vae.h"
#include "models/vae/vae_tiling_plan.h"

namespace fluxrt::models {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

TEST(VaeDeviceBudget, HostDevicesReadMemAvailable) {
  const size_t cpu = device_free_bytes(Device::cpu()), check = device_free_bytes(Device::placement_check());
  if (mem_available_bytes() == 0) GTEST_SKIP() << "no /proc/meminfo";
  EXPECT_GT(cpu, 0u);
  EXPECT_GT(check, 0u);
  // Both are the host's MemAvailable, read a moment apart.
  EXPECT_LT(cpu > check ? cpu - check : check - cpu, kGiB);
  EXPECT_NEAR(static_cast<double>(vae_auto_memory_budget_bytes(Device::placement_check())),
              static_cast<double>(mem_available_bytes() / 2), static_cast<double>(kGiB));
}

TEST(VaeDeviceBudget, GpuWithoutCudaIsAnError) {
  if (cuda::built_with_cuda()) GTEST_SKIP() << "built with CUDA";
  try {
    (void)device_free_bytes(Device::cuda(1));
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

// A CUDA memory backend that only answers free_bytes: 3 GiB on cuda:1, 0 (unknown) elsewhere.
size_t fake_free_bytes(Device d) { return d.index == 1 ? 3 * kGiB : 0; }
const DeviceMemoryHooks kFakeGpu{nullptr, nullptr, nullptr, fake_free_bytes};

// Swaps the fake in for each test and the registered hooks (the real CUDA ones in a CUDA build)
// back after it, so CI, which compiles the CUDA backend but has no GPU, runs these too. The tests
// allocate nothing on a GPU, so a real one present meanwhile is not disturbed.
class FakeGpuMemory : public ::testing::Test {
 protected:
  void SetUp() override { registered_ = register_device_memory(DeviceType::CUDA, &kFakeGpu); }
  void TearDown() override { register_device_memory(DeviceType::CUDA, registered_); }
  const DeviceMemoryHooks* registered_ = nullptr;
};

TEST_F(FakeGpuMemory, AutoBudgetIsHalfTheDevicesFreeMemory) {
  EXPECT_EQ(device_free_bytes(Device::cuda(1)), 3 * kGiB);
  EXPECT_EQ(vae_auto_memory_budget_bytes(Device::cuda(1)), 3 * kGiB / 2);
  EXPECT_EQ(vae_auto_memory_budget_bytes(Device::cuda(0)), 6 * kGiB) << "unknown: the 6 GiB fallback";
  const Flux1VaeConfig config;
  TilingOptions automatic;  // Auto, no budget of its own
  const TilePlan gpu = plan_vae_decode(config, DType::BF16, automatic, 1, 2048, 2048, Device::cuda(1));
  EXPECT_EQ(gpu.budget_bytes, 3 * kGiB / 2);
  EXPECT_TRUE(gpu.tiled) << "neither the plain nor the lean 2048^2 decode fits 1.5 GiB";
  const TilePlan host =
      plan_vae_decode(config, DType::BF16, automatic, 1, 2048, 2048, Device::placement_check());
  if (mem_available_bytes() > 0) {
    EXPECT_NEAR(static_cast<double>(host.budget_bytes), static_cast<double>(mem_available_bytes() / 2),
                static_cast<double>(kGiB));
  }
}

TEST_F(FakeGpuMemory, TilesThatCannotFitAreOneOutOfMemoryLine) {
  const Flux1VaeConfig config;
  TilingOptions tiles;
  tiles.mode = TilingMode::Always;
  const TilePlan plan = plan_vae_decode(config, DType::F32, tiles, 1, 4096, 4096, Device::cuda(1));
  ASSERT_TRUE(plan.tiled);
  ASSERT_GT(plan.tiled_estimate_bytes, size_t{64} << 20);
  try {
    check_tiled_pass_fits(plan, size_t{64} << 20, Device::cuda(1), "vae decode");
    FAIL() << "expected OutOfMemory";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory);
    EXPECT_NE(m.find("vae decode"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:1"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_NO_THROW(check_tiled_pass_fits(plan, 0, Device::cuda(1), "vae decode")) << "0: unknown, no check";
  EXPECT_NO_THROW(check_tiled_pass_fits(plan, plan.tiled_estimate_bytes, Device::cuda(1), "vae decode"));
  TilePlan untiled = plan;
  untiled.tiled = false;
  EXPECT_NO_THROW(check_tiled_pass_fits(untiled, 1, Device::cuda(1), "vae decode"));
}

}  // namespace
}  // namespace fluxrt::models
