// The real FLUX shapes for the hot ops (label "slow": the f64 oracle needs seconds per case).
// hidden 3072 (FLUX.1 / klein-4B, 24 heads) and 4096 (klein-9B, 32 heads), head dim 128,
// L = 512 text + 4096 image tokens (1024 px).
#include "conformance_common.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/vae_ops.h"

namespace fluxrt::test {
namespace {

const std::vector<DType> kAll{DType::F32, DType::BF16, DType::F16};

class FluxAdaln : public ::testing::TestWithParam<OpCase> {};
TEST_P(FluxAdaln, MatchesRef) {
  const OpCase& c = GetParam();
  const int64_t B = c.dims[0], D = c.dims[2];
  const Tensor x = random_normal(c.shape(), c.dtype, 1, 0.1, 3.0);
  const Tensor mod = random_normal({B, 6 * D}, c.dtype, 2, 0.0, 0.5);
  auto f = [&] { return ops::adaln_modulate(x, mod.narrow(1, 0, D), mod.narrow(1, D, D), 1e-6f); };
  EXPECT_TRUE(all_close(run_on(c.backend, f), run_on("ref", f), TolClass::Norm));
}
INSTANTIATE_TEST_SUITE_P(Flux, FluxAdaln,
                         ::testing::ValuesIn(make_cases({{2, 4608, 3072}, {1, 4608, 4096}}, {"B", "L", "D"}, kAll)),
                         case_name);

class FluxGatedResidual : public ::testing::TestWithParam<OpCase> {};
TEST_P(FluxGatedResidual, MatchesRef) {
  const OpCase& c = GetParam();
  const int64_t B = c.dims[0], D = c.dims[2];
  const Tensor x = random_normal(c.shape(), c.dtype, 3), y = random_normal(c.shape(), c.dtype, 4);
  const Tensor gate = random_normal({B, 3 * D}, c.dtype, 5).narrow(1, 2 * D, D);
  const Tensor r = run_on("ref", [&] { return ops::gated_residual(x, gate, y); });
  Tensor out = x.clone();
  run_on(c.backend, [&] {
    ops::gated_residual_(out, gate, y);
    return 0;
  });
  EXPECT_TRUE(all_close(out, r, TolClass::Elementwise));
}
INSTANTIATE_TEST_SUITE_P(Flux, FluxGatedResidual,
                         ::testing::ValuesIn(make_cases({{1, 4608, 3072}, {2, 4608, 4096}}, {"B", "L", "D"}, kAll)),
                         case_name);

class FluxQkNorm : public ::testing::TestWithParam<OpCase> {};
TEST_P(FluxQkNorm, MatchesRef) {
  const OpCase& c = GetParam();
  // q as a strided view of the fused qkv projection [B, L, 3 * H * 128].
  const int64_t B = c.dims[0], L = c.dims[1], H = c.dims[2];
  const Tensor qkv = random_normal({B, L, 3 * H * 128}, c.dtype, 6);
  const Tensor q = qkv.narrow(2, 0, H * 128).reshape({B, L, H, 128});
  const Tensor w = random_normal({128}, c.dtype, 7, 1.0, 0.2);
  auto f = [&] { return ops::rms_norm(q, w, 1e-6f); };
  EXPECT_TRUE(all_close(run_on(c.backend, f), run_on("ref", f), TolClass::Norm));
}
INSTANTIATE_TEST_SUITE_P(Flux, FluxQkNorm,
                         ::testing::ValuesIn(make_cases({{1, 4608, 24}, {1, 4608, 32}}, {"B", "L", "H"}, kAll)),
                         case_name);

class FluxSwiglu : public ::testing::TestWithParam<OpCase> {};
TEST_P(FluxSwiglu, MatchesRef) {
  const OpCase& c = GetParam();
  const Tensor x = random_normal(c.shape(), c.dtype, 8, 0.0, 2.0);
  auto f = [&] { return ops::swiglu(x); };
  EXPECT_TRUE(all_close(run_on(c.backend, f), run_on("ref", f), TolClass::Transcendental));
}
INSTANTIATE_TEST_SUITE_P(Flux, FluxSwiglu,
                         ::testing::ValuesIn(make_cases({{1, 4608, 18432}}, {"B", "L", "M2"}, {DType::BF16, DType::F32})),
                         case_name);

class FluxGelu : public ::testing::TestWithParam<OpCase> {};
TEST_P(FluxGelu, MatchesRef) {
  const OpCase& c = GetParam();
  const Tensor x = random_normal(c.shape(), c.dtype, 9, 0.0, 2.0);
  auto f = [&] { return ops::gelu_tanh(x); };
  EXPECT_TRUE(all_close(run_on(c.backend, f), run_on("ref", f), TolClass::Transcendental));
}
INSTANTIATE_TEST_SUITE_P(Flux, FluxGelu,
                         ::testing::ValuesIn(make_cases({{1, 4096, 12288}}, {"B", "L", "M"}, {DType::BF16})), case_name);

class VaeGroupNorm : public ::testing::TestWithParam<OpCase> {};
TEST_P(VaeGroupNorm, MatchesRef) {
  const OpCase& c = GetParam();
  const int64_t C = c.dims[1];
  const Tensor x = random_normal(c.shape(), c.dtype, 10, 0.3, 2.0);
  const Tensor w = random_normal({C}, c.dtype, 11, 1.0, 0.2), b = random_normal({C}, c.dtype, 12, 0.0, 0.2);
  auto f = [&] { return ops::group_norm(x, w, b, 32, 1e-6f, true); };
  EXPECT_TRUE(all_close(run_on(c.backend, f), run_on("ref", f), TolClass::Norm));
}
INSTANTIATE_TEST_SUITE_P(Vae, VaeGroupNorm,
                         ::testing::ValuesIn(make_cases({{1, 128, 512, 512}, {1, 512, 128, 128}}, {"N", "C", "H", "W"},
                                                        {DType::BF16, DType::F32})),
                         case_name);

}  // namespace
}  // namespace fluxrt::test
