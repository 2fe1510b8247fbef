// Real FLUX.2-klein-4B linear shapes (M = 1536 tokens) on both CPU implementations against the
// f64 reference. Minutes of CPU: label "slow".
#include <gtest/gtest.h>

#include "backend/cpu/gemm_packed.h"
#include "test_linear_common.h"

namespace fluxrt::test {
namespace {

class LinearSlow : public ::testing::TestWithParam<std::tuple<std::string, LinearCase>> {};

TEST_P(LinearSlow, MatchesReference) {
  const auto& [impl, c] = GetParam();
  if (impl == "packed" && !backend::gemm::packed_gemm_supported()) GTEST_SKIP() << "no AVX2";
  check_linear_case(impl, c);
}

INSTANTIATE_TEST_SUITE_P(
    Klein, LinearSlow,
    ::testing::Combine(::testing::Values("onednn", "packed"),
                       ::testing::Values(LinearCase{1536, 3072, 9216, DType::BF16, ""},
                                         LinearCase{1536, 9216, 3072, DType::BF16, "gated_inplace"},
                                         LinearCase{512, 3072, 18432, DType::BF16, "silu"},
                                         LinearCase{1536, 3072, 3072, DType::F32, "bias_gelu"})),
    [](const auto& info) { return linear_case_name(std::get<0>(info.param), std::get<1>(info.param)); });

}  // namespace
}  // namespace fluxrt::test
