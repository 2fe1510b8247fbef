// The CPU GroupNorm gives the same bits on any thread count: its statistics come from fixed slices
// of each group, and with fewer than two groups per thread the threads share each group (one run
// of slices each, a barrier between the sums and the output) instead of taking whole groups. Here
// 8 groups of 12 planes span 9 slices each, whose edges fall inside channel planes; 1 and 3
// threads take whole groups, 5 and 12 share them (12 leaves some threads without a slice). Also
// in place (y = x), where a thread's output must not reach another thread's statistics, and with
// an outlier that makes every group redo its sums around a better shift.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "backend/kernel_table.h"
#include "conformance_common.h"
#include "core/threads.h"
#include "ops/vae_ops.h"
#include "support/thread_count.h"

namespace fluxrt::test {
namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

struct Variant {
  std::string name;
  double mean;
  bool outlier;
};

// [1, 96, 75, 77] in 8 groups: 12 planes of 5775 elements, 69300 elements a group.
const Shape kShape({1, 96, 75, 77});
constexpr int kGroups = 8;

Tensor input(const Variant& v, DType dt) {
  Tensor x = random_normal(kShape, dt, 301, v.mean, 1.5);
  if (v.outlier) x.narrow(2, 0, 1).narrow(3, 0, 1).fill(-400.0);  // the first element of every group
  return x;
}

TEST(CpuGroupNormThreads, SameBitsOnAnyThreadCountAndMatchesRef) {
  RestoreThreadCount restore;
  const std::vector<Variant> variants = {{"plain", 0.2, false}, {"offset", 50.0, false}, {"outlier", 0.2, true}};
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor w = random_normal({kShape[1]}, dt, 302, 1.0, 0.3), b = random_normal({kShape[1]}, dt, 303, 0.0, 0.3);
    for (const Variant& v : variants) {
      for (bool silu : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + v.name + (silu ? " silu" : ""));
        const Tensor x = input(v, dt);
        auto f = [&] { return ops::group_norm(x, w, b, kGroups, 1e-6f, silu); };
        set_num_threads(1);
        const Tensor one = run_on("cpu", f);
        EXPECT_TRUE(all_close(one, run_on("ref", f), TolClass::Norm));
        for (int threads : {3, 5, 12}) {
          set_num_threads(threads);
          EXPECT_TRUE(bitwise_equal(run_on("cpu", f), one)) << threads << " threads";
        }
      }
    }
  }
}

TEST(CpuGroupNormThreads, InPlaceSameBits) {
  RestoreThreadCount restore;
  for (const Variant& v : {Variant{"plain", 0.2, false}, Variant{"outlier", 0.2, true}}) {
    SCOPED_TRACE(v.name);
    const Tensor x = input(v, DType::BF16);
    const Tensor w = random_normal({kShape[1]}, DType::BF16, 302, 1.0, 0.3);
    set_num_threads(1);
    const Tensor expected = ops::group_norm(x, w, Tensor(), kGroups, 1e-6f, true);
    for (int threads : {1, 5, 12}) {
      set_num_threads(threads);
      Tensor y = x.clone();
      backend::cpu_kernels().group_norm(backend::GroupNormArgs{y, w, Tensor(), y, kGroups, 1e-6f, true});
      EXPECT_TRUE(bitwise_equal(y, expected)) << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace fluxrt::test
