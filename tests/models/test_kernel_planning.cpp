// Kernel planning (backend::KernelTable::planning, ops::ScopedKernelPlanning): a FLUX.2 forward
// run under the CPU's planning table makes the oneDNN primitives (linears, split linears and the
// matmul attention) for its shapes and computes nothing; the real forward after it then makes
// none, and gives bit for bit what an unplanned model gives. The denoising loop and `bench
// transformer` plan this way before their first step (issue 27: no one-time work in a timed step).
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/attention_onednn.h"
#include "backend/cpu/onednn_matmul.h"
#include "core/quant.h"
#include "models/flux/flux2_config.h"
#include "models/flux/flux2_transformer.h"
#include "models/synthetic_weights.h"
#include "ops/dispatch.h"

namespace fluxrt::models {
namespace {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

class KernelPlanning : public ::testing::TestWithParam<std::optional<QuantType>> {};

TEST_P(KernelPlanning, PlannedForwardLeavesNoOneTimeWorkAndChangesNothing) {
  // oneDNN for every linear and for attention, as on a CPU with bf16 matrix units (here in f32);
  // quantized weights take the oneDNN chunk path then.
  const ScopedEnv linear("FLUXRT_LINEAR_IMPL", "onednn");
  const ScopedEnv attention("FLUXRT_ATTENTION_IMPL", "onednn");
  Flux2Config c;
  c.hidden = 256, c.heads = 2, c.double_blocks = 1, c.single_blocks = 2, c.context_dim = 32,
  c.mlp_hidden = 768;
  Flux2LoadOptions opt;
  opt.dtype = DType::BF16;
  opt.synthetic_weights = GetParam();
  const auto planned = Flux2Transformer::synthetic(c, 7, opt);
  const auto unplanned = Flux2Transformer::synthetic(c, 7, opt);
  const int64_t li = 256, lt = 24;  // a 16 x 16 latent grid and 24 text tokens
  const Tensor x = synthetic_tensor({1, li, 128}, DType::BF16, 1, 1.0f);
  const Tensor ctx = synthetic_tensor({1, lt, 32}, DType::BF16, 2, 1.0f);
  std::vector<float> xi, ti;
  for (int64_t i = 0; i < li; ++i) xi.insert(xi.end(), {0.0f, float(i / 16), float(i % 16), 0.0f});
  for (int64_t i = 0; i < lt; ++i) ti.insert(ti.end(), {0.0f, 0.0f, 0.0f, float(i)});
  const Tensor x_ids = Tensor::from_vector(xi, {li, 4});
  const Tensor ctx_ids = Tensor::from_vector(ti, {lt, 4});
  const Tensor t = Tensor::from_vector({0.7f}, {1});

  ASSERT_TRUE(ops::ScopedKernelPlanning::available(Device::cpu()));
  const int64_t entries0 = backend::onednn::matmul_entries_created();
  {
    ops::ScopedKernelPlanning planning(Device::cpu());
    (void)planned->forward(x, x_ids, ctx, ctx_ids, t);
  }
  const int64_t entries1 = backend::onednn::matmul_entries_created();
  const int64_t attention_sets = backend::cpu::attention_onednn_primitive_sets();
  EXPECT_GT(entries1, entries0) << "planning made the linears' primitives";
  EXPECT_GE(attention_sets, 1) << "planning made the attention primitives";

  const Tensor y = planned->forward(x, x_ids, ctx, ctx_ids, t);
  EXPECT_EQ(backend::onednn::matmul_entries_created(), entries1) << "the real forward made new primitives";
  EXPECT_EQ(backend::cpu::attention_onednn_primitive_sets(), attention_sets);

  const Tensor y_ref = unplanned->forward(x, x_ids, ctx, ctx_ids, t);
  EXPECT_EQ(y.to_vector(), y_ref.to_vector()) << "planning changed the result";
}

// Dense bf16 weights (one matmul each; single_blocks' linear1 of 2304 columns), and Q8_0 ones
// (512-row chunks and a tail, dequantized per call).
INSTANTIATE_TEST_SUITE_P(Weights, KernelPlanning,
                         ::testing::Values(std::optional<QuantType>{},
                                           std::optional<QuantType>{QuantType::Q8_0}),
                         [](const auto& info) {
                           return info.param ? std::string(quant_name(*info.param)) : "bf16";
                         });

// Without a planning table (a forced ref table, as tests use) nothing is planned and the ops run.
TEST(KernelPlanningTable, AForcedTableStays) {
  ops::ScopedKernelTable ref(backend::ref_kernels());
  EXPECT_FALSE(ops::ScopedKernelPlanning::available(Device::cpu()));
  ops::ScopedKernelPlanning planning(Device::cpu());
  EXPECT_STREQ(ops::kernels_for(Device::cpu()).name, "ref");
}

}  // namespace
}  // namespace fluxrt::models
