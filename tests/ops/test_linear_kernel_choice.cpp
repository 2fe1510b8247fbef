// Which oneDNN implementation the CPU linear lands on for every FLUX linear configuration. oneDNN
// 2.6 silently answers some post-op chains with its reference matmul (~1000x slower: a tiny-klein
// f32 step took 11.5 s instead of 0.11 s), so this test asks linear_cpu_kernel_for — the
// primitive_desc impl_info_str of the primitive run() would use — and fails on any "ref" kernel.
// Shapes are the FLUX ones (hidden 3072, MLP 9216/12288, time embedding 256 -> 3072) at the row
// counts of a step (1 image token row, 512 text tokens, 1536 and 4608 tokens).
#include <gtest/gtest.h>

#include <cstdio>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/linear_cpu.h"
#include "backend/cpu/onednn_util.h"
#include "support/random_tensor.h"

namespace fluxrt::test {
namespace {

struct Config {
  const char* name;
  bool bias;
  backend::Activation act;
  bool gated;
  bool in_place;  // residual is y (the post-op sum form)
};

const Config kConfigs[] = {
    {"plain", false, backend::Activation::None, false, false},
    {"bias", true, backend::Activation::None, false, false},
    {"bias_gelu_tanh", true, backend::Activation::GeluTanh, false, false},
    {"bias_silu", true, backend::Activation::Silu, false, false},
    {"gated_residual", true, backend::Activation::None, true, false},
    {"gated_residual_in_place", true, backend::Activation::None, true, true},
    {"gated_residual_no_bias", false, backend::Activation::None, true, false},
    {"gelu_gated_residual", true, backend::Activation::GeluTanh, true, false},
};

struct Shape2 {
  int64_t k, n;
};
// attention out / modulation chunk, qkv, MLP in (FLUX.2 SwiGLU half), MLP out, time embedding.
const Shape2 kShapes[] = {{3072, 3072}, {3072, 9216}, {9216, 3072}, {256, 3072}};
const int64_t kRows[] = {1, 1536, 4608};

// Tensors are allocated but never written or read (the query builds primitives only).
std::string kernel_for(const backend::PreparedLinear& w, const Config& c, int64_t m, int64_t k, int64_t n, DType dt) {
  backend::LinearArgs a;
  a.x = Tensor::empty({m, k}, dt);
  a.w = &w;
  a.activation = c.act;
  a.y = Tensor::empty({m, n}, dt);
  if (c.gated) {
    a.gate = Tensor::zeros({n}, dt);
    a.residual = c.in_place ? a.y : Tensor::empty({m, n}, dt);
  }
  return backend::linear_cpu_kernel_for(a);
}

// Asks the kernel of every (shape, weight dtype, config, rows, activation dtype) and fails on any
// that is not oneDNN's or is one of its reference kernels; returns how many were asked. Weights in
// both checkpoint dtypes, forced onto oneDNN (bf16 weights take the packed GEMM by default on CPUs
// without native bf16; FLUXRT_LINEAR_IMPL=onednn selects oneDNN there). Without native bf16 both
// compute in f32 (the same primitives), so bf16 is asked only where it differs. The values do not
// matter for the choice: constants are quick to make. Activations: both dtypes, or (when
// `activations_as_weights`) the weights' own, as the text encoders call them.
int expect_no_reference_matmul(const std::vector<Shape2>& shapes, const std::vector<Config>& configs,
                               const std::vector<int64_t>& rows, bool activations_as_weights,
                               std::set<std::string>& kernels) {
  int checked = 0;
  for (const Shape2 s : shapes) {
    for (DType wdt : {DType::F32, DType::BF16}) {
      if (wdt == DType::BF16 && !backend::cpu_native_bf16()) continue;
      const Tensor w = Tensor::full({s.n, s.k}, wdt, 0.02);
      const Tensor b = Tensor::full({s.n}, wdt, 0.01);
      const auto with_bias = backend::prepare_linear_cpu_with(w, b, backend::CpuLinearImpl::OneDnn);
      const auto without_bias = backend::prepare_linear_cpu_with(w, Tensor(), backend::CpuLinearImpl::OneDnn);
      const std::vector<DType> activations =
          activations_as_weights ? std::vector<DType>{wdt} : std::vector<DType>{DType::F32, DType::BF16};
      for (const Config& c : configs) {
        for (int64_t m : rows) {
          for (DType adt : activations) {
            const std::string kernel = kernel_for(c.bias ? *with_bias : *without_bias, c, m, s.k, s.n, adt);
            SCOPED_TRACE(::testing::Message() << c.name << " M=" << m << " K=" << s.k << " N=" << s.n << " weights "
                                              << dtype_name(wdt) << " activations " << dtype_name(adt) << ": "
                                              << kernel);
            EXPECT_EQ(kernel.rfind("onednn:", 0), 0u);
            EXPECT_NE(kernel.rfind("onednn:ref", 0), 0u) << "oneDNN's reference matmul";
            EXPECT_FALSE(backend::onednn::is_reference_impl(kernel.substr(kernel.find(':') + 1)));
            kernels.insert(kernel);
            ++checked;
          }
        }
      }
    }
  }
  return checked;
}

TEST(LinearKernelChoice, NoFluxLinearConfigurationUsesTheReferenceMatmul) {
  std::set<std::string> kernels;
  const int checked = expect_no_reference_matmul(std::vector<Shape2>(std::begin(kShapes), std::end(kShapes)),
                                                 std::vector<Config>(std::begin(kConfigs), std::end(kConfigs)),
                                                 std::vector<int64_t>(std::begin(kRows), std::end(kRows)),
                                                 /*activations_as_weights=*/false, kernels);
  const int weight_dtypes = backend::cpu_native_bf16() ? 2 : 1;
  EXPECT_EQ(checked, 4 * weight_dtypes * 8 * 3 * 2);
  for (const std::string& k : kernels) std::printf("[kernel] %s\n", k.c_str());
}

// The text encoders' and klein's other linears (plain and with bias, as they are called) at prompt
// lengths: Qwen3-4B (hidden 2560, q 4096, kv 1024, MLP 9728), T5-XXL (4096, MLP 10240), CLIP-L
// (768, MLP 3072) and klein's single-block output (3072 + 9216 -> 3072). Rows 77 (CLIP), 512
// (T5/Qwen3) and 4608 (a 1024^2 klein step).
TEST(LinearKernelChoice, NoTextEncoderLinearUsesTheReferenceMatmul) {
  std::set<std::string> kernels;
  const int checked = expect_no_reference_matmul(
      {{2560, 4096}, {2560, 1024}, {4096, 2560}, {2560, 9728}, {9728, 2560}, {4096, 4096}, {4096, 10240},
       {10240, 4096}, {768, 768}, {768, 3072}, {3072, 768}, {12288, 3072}},
      {kConfigs[0], kConfigs[1]}, {77, 512, 4608}, /*activations_as_weights=*/true, kernels);
  EXPECT_EQ(checked, 12 * (backend::cpu_native_bf16() ? 2 : 1) * 2 * 3);
}

// The packed GEMM answers for itself (no oneDNN primitive involved).
TEST(LinearKernelChoice, PackedWeightsReportThePackedKernel) {
  const Tensor w = random_normal({64, 96}, DType::BF16, 1, 0.0, 0.1);
  const auto packed = backend::prepare_linear_cpu_with(w, Tensor(), backend::CpuLinearImpl::Packed);
  backend::LinearArgs a;
  a.x = Tensor::empty({5, 96}, DType::BF16);
  a.w = packed.get();
  a.y = Tensor::empty({5, 64}, DType::BF16);
  const std::string kernel = backend::linear_cpu_kernel_for(a);
  EXPECT_TRUE(kernel == "packed-avx2" || kernel.rfind("onednn:", 0) == 0) << kernel;  // onednn where unsupported
}

// bf16 weights take the AMX GEMM by default exactly where the CPU and OS have the tile unit; f32
// weights stay on oneDNN, and asking for the AMX GEMM with f32 weights gets the default.
TEST(LinearKernelChoice, Bf16WeightsTakeTheAmxGemmWhereTheCpuHasIt) {
  const auto kernel = [](DType dt, backend::CpuLinearImpl impl) {
    const auto p = backend::prepare_linear_cpu_with(Tensor::zeros({64, 96}, dt), Tensor(), impl);
    backend::LinearArgs a;
    a.x = Tensor::empty({5, 96}, dt);
    a.w = p.get();
    a.y = Tensor::empty({5, 64}, dt);
    return backend::linear_cpu_kernel_for(a);
  };
  const bool amx = backend::gemm::amx_gemm_supported();
  EXPECT_EQ(kernel(DType::BF16, backend::CpuLinearImpl::Auto) == "amx-bf16", amx);
  EXPECT_EQ(kernel(DType::BF16, backend::CpuLinearImpl::Amx) == "amx-bf16", amx);
  EXPECT_EQ(kernel(DType::F32, backend::CpuLinearImpl::Amx).rfind("onednn:", 0), 0u);
  EXPECT_EQ(kernel(DType::BF16, backend::CpuLinearImpl::OneDnn).rfind("onednn:", 0), 0u);
  if (!amx) GTEST_SKIP() << "no AMX here: the default for bf16 weights is oneDNN or the packed GEMM";
}

}  // namespace
}  // namespace fluxrt::test
