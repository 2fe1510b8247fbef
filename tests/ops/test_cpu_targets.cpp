// The CPU kernels under every Highway target this binary carries and this CPU supports (e.g.
// AVX2 and the portable baseline here; AVX-512 too on such machines), so the paths a user's CPU
// picks at run time are all tested, including the scalar f16 store of non-x86 targets.
#include "backend/cpu/hwy_targets.h"
// (hwy_targets.h must precede the Highway headers so HWY_TARGETS matches the kernels')
#include <hwy/targets.h>

#include "conformance_common.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/vae_ops.h"

namespace fluxrt::test {
namespace {

struct TargetGuard {
  explicit TargetGuard(int64_t t) { hwy::SetSupportedTargetsForTest(t); }
  ~TargetGuard() { hwy::SetSupportedTargetsForTest(0); }
};

TEST(CpuTargets, EveryTargetMatchesRef) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    SCOPED_TRACE(hwy::TargetName(target));
    std::printf("target %s\n", hwy::TargetName(target));
    TargetGuard guard(target);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(dtype_name(dt));
      // Even (SwiGLU halves), with tails for 8 and 16 lanes.
      for (int64_t D : {int64_t{38}, int64_t{130}}) {
        const Tensor x = random_normal({2, 3, D}, dt, 1, 0.2, 2.0), y = random_normal({2, 3, D}, dt, 2);
        const Tensor mod = random_normal({2, 3 * D}, dt, 3, 0.0, 0.5);
        const Tensor shift = mod.narrow(1, 0, D), scale = mod.narrow(1, D, D), gate = mod.narrow(1, 2 * D, D);
        const Tensor w = random_normal({D}, dt, 4, 1.0, 0.3);
        const Tensor img = random_normal({1, 32, 3, D}, dt, 5), cw = random_normal({32}, dt, 6, 1.0, 0.2);
        // Channels-last GroupNorm: D channels in 2 groups, a tail for 8 and 16 lanes.
        const Tensor img_cl = ops::to_channels_last(random_normal({1, D, 3, 5}, dt, 7));
        auto norms = [&] {
          return std::vector<Tensor>{ops::adaln_modulate(x, shift, scale),
                                     ops::layer_norm(x, w, w, 1e-5f),
                                     ops::rms_norm(x, w, 1e-6f),
                                     ops::t5_rms_norm(x, w),
                                     ops::softmax(x),
                                     ops::group_norm(img, cw, cw, 32, 1e-6f, true),
                                     ops::group_norm(img_cl, w, w, 2, 1e-6f, true)};
        };
        auto elementwise = [&] {
          return std::vector<Tensor>{ops::silu(x),      ops::gelu_tanh(x),  ops::quick_gelu(x),
                                     ops::swiglu(x),    ops::add(x, w),     ops::gated_residual(x, gate, y),
                                     ops::latent_normalize(img, cw, cw.to(DType::F32).to(dt))};
        };
        const auto rn = run_on("ref", norms), yn = run_on("cpu", norms);
        for (size_t i = 0; i < rn.size(); ++i) EXPECT_TRUE(all_close(yn[i], rn[i], TolClass::Norm)) << "norm op " << i;
        const auto re = run_on("ref", elementwise), ye = run_on("cpu", elementwise);
        for (size_t i = 0; i < re.size(); ++i)
          EXPECT_TRUE(all_close(ye[i], re[i], TolClass::Transcendental)) << "element-wise op " << i;
      }
    }
  }
}

}  // namespace
}  // namespace fluxrt::test
