// ops::ScopedKernelTiming (bench transformer --op-times): every kernel call on the thread is
// counted under its op and shape, the results are the untimed kernels', a fallback shows up as the
// kernels it is composed of, and the thread's table is restored afterwards.
#include "conformance_common.h"
#include "ops/elementwise.h"
#include "ops/kernel_timing.h"
#include "ops/linear.h"
#include "ops/norm.h"

namespace fluxrt::test {
namespace {

const ops::KernelTime* find(const std::vector<ops::KernelTime>& times, const std::string& op) {
  for (const auto& t : times)
    if (t.op == op) return &t;
  return nullptr;
}

TEST(KernelTiming, CountsEachCallByOpAndShapeWithUnchangedResults) {
  const Tensor w = random_normal({16, 8}, DType::BF16, 1);
  const Tensor x = random_normal({4, 8}, DType::BF16, 2);
  const Tensor scale = random_normal({8}, DType::F32, 3);
  const auto prepared = ops::prepare_linear(w);
  const Tensor y_plain = ops::linear(x, *prepared);
  const Tensor n_plain = ops::rms_norm(x, scale, 1e-6f);

  std::vector<ops::KernelTime> times;
  Tensor y, y2, n, c;
  {
    ops::ScopedKernelTiming timing(Device::cpu());
    y = ops::linear(x, *prepared);
    y2 = ops::linear(x, *prepared);
    n = ops::rms_norm(x, scale, 1e-6f);
    c = ops::concat({x, x}, 1);
    times = timing.times();
  }
  EXPECT_TRUE(all_close(y, y_plain, TolClass::Exact));
  EXPECT_TRUE(all_close(y2, y_plain, TolClass::Exact));
  EXPECT_TRUE(all_close(n, n_plain, TolClass::Exact));

  const ops::KernelTime* lin = find(times, "linear 8->16 M=4");
  ASSERT_NE(lin, nullptr);
  EXPECT_EQ(lin->calls, 2);
  EXPECT_TRUE(lin->matrix);
  EXPECT_DOUBLE_EQ(lin->flops, 2 * 2.0 * 4 * 8 * 16);
  EXPECT_GE(lin->seconds, 0.0);
  const ops::KernelTime* norm = find(times, "rms_norm");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->calls, 1);
  EXPECT_FALSE(norm->matrix);
  EXPECT_DOUBLE_EQ(norm->flops, 0.0);
  ASSERT_NE(find(times, "concat"), nullptr);
  EXPECT_EQ(times.size(), 3u);
  for (size_t i = 1; i < times.size(); ++i) EXPECT_GE(times[i - 1].seconds, times[i].seconds);
  EXPECT_STREQ(ops::kernels_for(Device::cpu()).name, "cpu");
}

TEST(KernelTiming, FallbackIsTimedAsTheKernelsItIsComposedOf) {
  backend::KernelTable no_glu = backend::cpu_kernels();
  no_glu.name = "cpu-noglu";
  no_glu.glu = nullptr;
  const Tensor x = random_normal({2, 3, 16}, DType::F32, 4);
  ops::ScopedKernelTable forced(no_glu);
  std::vector<ops::KernelTime> times;
  {
    ops::ScopedKernelTiming timing(Device::cpu());
    (void)ops::swiglu(x);
    times = timing.times();
  }
  EXPECT_EQ(find(times, "glu silu"), nullptr);
  EXPECT_NE(find(times, "unary silu"), nullptr);
  EXPECT_NE(find(times, "binary mul"), nullptr);
  EXPECT_STREQ(ops::kernels_for(Device::cpu()).name, "cpu-noglu");
}

TEST(KernelTiming, OneScopeAtATime) {
  ops::ScopedKernelTiming timing(Device::cpu());
  try {
    ops::ScopedKernelTiming second(Device::cpu());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
  (void)ops::silu(Tensor::zeros({4}, DType::F32));  // the first scope still works
  EXPECT_NE(find(timing.times(), "unary silu"), nullptr);
}

TEST(KernelTiming, TimedRegionOutsideAScopeRecordsNothing) {
  (void)ops::concat({Tensor::zeros({2}, DType::F32), Tensor::zeros({3}, DType::F32)}, 0);
  ops::ScopedKernelTiming timing(Device::cpu());
  EXPECT_TRUE(timing.times().empty());
}

}  // namespace
}  // namespace fluxrt::test
