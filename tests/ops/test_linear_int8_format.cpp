// LinearFormat::Int8 (precision int8) at the ops layer: a model's per-weight request for W8A8,
// without FLUXRT_LINEAR_IMPL. It must be the very W8A8 path the env var runs (the same bits), not
// the usual bf16 one; Q8_0 / fp8 weights are requantized, smaller types kept in their bytes; a
// backend without int8 linears refuses it rather than running bf16 under that name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/linear_cpu.h"
#include "backend/kernel_table.h"
#include "core/error.h"
#include "core/quant.h"
#include "ops/dispatch.h"
#include "ops/linear.h"
#include "support/quantized_weight.h"
#include "support/random_tensor.h"

namespace fluxrt {
namespace {

using ops::LinearFormat;
using test::random_normal;

bool is_int8(const ops::PreparedLinear& p) {
  return backend::describe_linear_cpu(p).rfind("onednn-int8", 0) == 0;
}

// The test binary may run with FLUXRT_LINEAR_IMPL set by whoever runs it: each case states its own.
class Int8Format : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("FLUXRT_LINEAR_IMPL"); }
  void TearDown() override { unsetenv("FLUXRT_LINEAR_IMPL"); }
};

TEST_F(Int8Format, IsTheEnvVarsW8A8PathBitForBit) {
  const Tensor w = random_normal({96, 192}, DType::BF16, 1, 0.0, 0.07);
  const Tensor bias = random_normal({96}, DType::F32, 2);
  const Tensor x = random_normal({2, 37, 192}, DType::BF16, 3);
  const auto int8 = ops::prepare_linear(w, bias, Device::cpu(), LinearFormat::Int8);
  const auto native = ops::prepare_linear(w, bias);
  ASSERT_TRUE(is_int8(*int8)) << backend::describe_linear_cpu(*int8);
  ASSERT_FALSE(is_int8(*native)) << backend::describe_linear_cpu(*native);
  // The source stays the weight (per-request LoRA merges read it), with no copy of it made.
  EXPECT_EQ(int8->weight.raw_data(), w.raw_data());
  setenv("FLUXRT_LINEAR_IMPL", "w8a8", 1);
  const auto env = ops::prepare_linear(w, bias);
  unsetenv("FLUXRT_LINEAR_IMPL");
  ASSERT_TRUE(is_int8(*env));
  const std::vector<float> y = ops::linear(x, *int8, ops::Activation::GeluTanh).to_vector();
  EXPECT_EQ(y, ops::linear(x, *env, ops::Activation::GeluTanh).to_vector());
  EXPECT_NE(y, ops::linear(x, *native, ops::Activation::GeluTanh).to_vector()) << "int8 did not run";
}

TEST_F(Int8Format, RequantizesQ8_0AndKeepsTheSmallerTypes) {
  const int64_t N = 48, K = 256;
  const Tensor w = random_normal({N, K}, DType::F32, 4, 0.0, 0.05);
  auto quantized = [&](QuantType type) { return test::quantize_weight(type, w); };
  const Tensor x = random_normal({5, K}, DType::BF16, 5);
  const QuantizedMatrix q8 = quantized(QuantType::Q8_0);
  const auto p8 = ops::prepare_linear_quantized(q8, Tensor(), Device::cpu(), LinearFormat::Int8);
  ASSERT_TRUE(is_int8(*p8)) << backend::describe_linear_cpu(*p8);
  EXPECT_FALSE(p8->quantized->bytes.defined()) << "the int8 copy replaces the Q8_0 bytes";
  setenv("FLUXRT_LINEAR_IMPL", "w8a8", 1);
  const auto env8 = ops::prepare_linear_quantized(q8, Tensor());
  unsetenv("FLUXRT_LINEAR_IMPL");
  EXPECT_EQ(ops::linear(x, *p8).to_vector(), ops::linear(x, *env8).to_vector());

  // Q4_0: int8 would take twice its bytes; it stays as the native preparation keeps it.
  const QuantizedMatrix q4 = quantized(QuantType::Q4_0);
  const auto p4 = ops::prepare_linear_quantized(q4, Tensor(), Device::cpu(), LinearFormat::Int8);
  EXPECT_FALSE(is_int8(*p4)) << backend::describe_linear_cpu(*p4);
  ASSERT_TRUE(p4->quantized && p4->quantized->bytes.defined());
  EXPECT_EQ(ops::linear(x, *p4).to_vector(),
            ops::linear(x, *ops::prepare_linear_quantized(q4, Tensor())).to_vector());
}

// The ref backend has no int8 GEMM: Unsupported, naming it, for dense and quantized weights.
TEST_F(Int8Format, RefusedWhereTheBackendHasNone) {
  ops::ScopedKernelTable force(backend::ref_kernels());
  const Tensor w = random_normal({8, 32}, DType::F32, 6);
  QuantizedMatrix q;
  q.type = QuantType::Q8_0;
  q.rows = 8;
  q.cols = 32;
  q.bytes = Tensor::zeros({static_cast<int64_t>(q.nbytes())}, DType::U8);
  for (int quantized = 0; quantized < 2; ++quantized) {
    try {
      if (quantized)
        ops::prepare_linear_quantized(q, Tensor(), Device::cpu(), LinearFormat::Int8);
      else
        ops::prepare_linear(w, Tensor(), Device::cpu(), LinearFormat::Int8);
      ADD_FAILURE() << "the ref backend took int8";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported);
      const std::string m = e.what();
      EXPECT_NE(m.find("int8"), std::string::npos) << m;
      EXPECT_NE(m.find("ref"), std::string::npos) << m;
    }
  }
  EXPECT_NO_THROW(ops::prepare_linear(w, Tensor()));  // the native format still prepares
}

}  // namespace
}  // namespace fluxrt
