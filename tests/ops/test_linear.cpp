// Linear conformance: the CPU implementations (oneDNN matmul, the packed AVX2 GEMM, and the AMX
// GEMM where the CPU has it; f32 and f16 weights take the default path under "amx") against
// the f64 reference, f32/bf16/f16, odd and tile-boundary shapes, epilogues (bias, GELU-tanh, SiLU,
// gated residual, in place), strided rows; plus the ops front end (leading dims, errors).
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/gemm_packed.h"
#include "backend/cpu/onednn_matmul.h"
#include "ops/dispatch.h"
#include "ops/linear.h"
#include "test_linear_common.h"

namespace fluxrt::test {
namespace {

std::vector<std::string> impls() {
  std::vector<std::string> v{"onednn"};
  if (backend::gemm::packed_gemm_supported()) v.push_back("packed");
  if (backend::gemm::amx_gemm_supported()) v.push_back("amx");
  return v;
}

std::vector<LinearCase> cases() {
  std::vector<LinearCase> v;
  // Odd sizes from {1, 7, 17, 63, 65, 129}.
  const int64_t odd[][3] = {{1, 1, 1},    {1, 129, 65}, {7, 17, 63},  {17, 65, 7},
                            {63, 129, 65}, {65, 7, 129}, {129, 63, 17}, {7, 1, 17}};
  for (auto* d : odd)
    for (DType dt : {DType::F32, DType::BF16}) v.push_back({d[0], d[1], d[2], dt, ""});
  // Tile boundaries of the packed GEMM: Mr = 6, Mc = 96, Nr = 16, Nc = 512, Kc = 256.
  const int64_t tiles[][3] = {{5, 255, 15}, {6, 256, 16}, {7, 257, 17}, {95, 16, 511}, {96, 32, 512},
                              {97, 512, 513}, {193, 300, 1025}};
  for (auto* d : tiles)
    for (DType dt : {DType::F32, DType::BF16}) v.push_back({d[0], d[1], d[2], dt, ""});
  // Tile boundaries of the AMX GEMM: 32-row blocks and 32-column panels, K steps of 32, tasks of
  // 256 columns x up to 512 rows, passes of K 512.
  const int64_t amx_tiles[][3] = {{31, 31, 31},   {32, 32, 32},    {33, 33, 33},    {1, 544, 257},
                                  {511, 96, 255}, {513, 513, 256}, {64, 1000, 289}, {1025, 64, 40}};
  for (auto* d : amx_tiles) v.push_back({d[0], d[1], d[2], DType::BF16, ""});
  v.push_back({513, 520, 300, DType::BF16, "strided_bias_silu_gated"});
  // Epilogues and layouts.
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    for (const char* var : {"bias", "gelu", "silu", "bias_gelu", "gated", "gated_inplace", "strided",
                            "strided_bias_silu_gated"})
      v.push_back({37, 96, 70, dt, var});
  }
  v.push_back({13, 40, 24, DType::F16, ""});
  // One real FLUX width kept small in M so the default suite stays fast (the full shapes are in
  // test_linear_slow.cpp).
  v.push_back({24, 3072, 3072, DType::BF16, "bias_gelu"});
  v.push_back({24, 3072, 3072, DType::F32, ""});
  // Wider than one oneDNN matmul's widest (4608 columns): 4, 9 and 6 column groups, and groups of
  // 4032 with a narrower last one, with every epilogue slicing along.
  v.push_back({20, 64, 18432, DType::F32, "bias_gelu"});
  v.push_back({7, 32, 40000, DType::F32, "bias_gelu"});
  v.push_back({33, 48, 27648, DType::BF16, "gated_inplace"});
  v.push_back({9, 40, 20000, DType::F32, "strided_bias_silu_gated"});
  v.push_back({9, 40, 20000, DType::F16, "gated"});
  // Deeper than one bf16 oneDNN matmul's deepest (4096) where the CPU has bf16 matmul: K slices
  // summed in f32 with the epilogue on the last, two and three slices (multiples of 64 but the
  // last), every epilogue and strided rows (elsewhere the whole K, the same check).
  v.push_back({19, 8292, 40, DType::BF16, "strided_bias_silu_gated"});
  v.push_back({9, 4160, 72, DType::BF16, "gated_inplace"});
  v.push_back({5, 12288, 48, DType::BF16, "bias_gelu"});
  v.push_back({3, 9216, 16, DType::F16, "gated"});
  return v;
}

class LinearConformance : public ::testing::TestWithParam<std::tuple<std::string, LinearCase>> {};

TEST_P(LinearConformance, MatchesReference) {
  const auto& [impl, c] = GetParam();
  check_linear_case(impl, c);
}

INSTANTIATE_TEST_SUITE_P(Cpu, LinearConformance, ::testing::Combine(::testing::ValuesIn(impls()), ::testing::ValuesIn(cases())),
                         [](const auto& info) {
                           return linear_case_name(std::get<0>(info.param), std::get<1>(info.param));
                         });

// GELU-tanh and SiLU over a wide range, including where exp overflows or underflows in f32.
// oneDNN linears wider than 4608 columns run as equal column groups (multiples of 64).
TEST(LinearOneDnn, WideWeightsSplitIntoColumnGroups) {
  const auto desc = [](int64_t n) {
    return backend::describe_linear_cpu(*backend::prepare_linear_cpu_with(
        Tensor::zeros({n, 32}, DType::F32), Tensor(), backend::CpuLinearImpl::OneDnn));
  };
  EXPECT_EQ(desc(3072).find("column groups"), std::string::npos) << desc(3072);
  EXPECT_EQ(desc(4608).find("column groups"), std::string::npos) << desc(4608);
  EXPECT_NE(desc(9216).find("2 column groups of 4608"), std::string::npos) << desc(9216);
  EXPECT_NE(desc(18432).find("4 column groups of 4608"), std::string::npos) << desc(18432);
  EXPECT_NE(desc(27648).find("6 column groups of 4608"), std::string::npos) << desc(27648);
  EXPECT_NE(desc(20000).find("5 column groups of 4032"), std::string::npos) << desc(20000);
  EXPECT_NE(desc(40000).find("9 column groups of 4480"), std::string::npos) << desc(40000);
}

// bf16 oneDNN linears deeper than 4096 run as equal slices of K (multiples of 64) where the CPU
// has bf16 matmul (its f32 fallback and f32 weights keep the whole depth).
TEST(LinearOneDnn, DeepBf16WeightsSplitIntoSlicesOfK) {
  const auto desc = [](int64_t k, DType dtype) {
    return backend::describe_linear_cpu(*backend::prepare_linear_cpu_with(
        Tensor::zeros({16, k}, dtype), Tensor(), backend::CpuLinearImpl::OneDnn));
  };
  EXPECT_EQ(desc(4096, DType::BF16).find("slices of K"), std::string::npos) << desc(4096, DType::BF16);
  EXPECT_EQ(desc(12288, DType::F32).find("slices of K"), std::string::npos) << desc(12288, DType::F32);
  if (!backend::cpu_native_bf16()) {
    EXPECT_EQ(desc(12288, DType::BF16).find("slices of K"), std::string::npos) << desc(12288, DType::BF16);
    GTEST_SKIP() << "no bf16 matmul on this CPU: the slices are not used (the conformance cases still run)";
  }
  EXPECT_NE(desc(12288, DType::BF16).find("3 slices of K 4096"), std::string::npos)
      << desc(12288, DType::BF16);
  EXPECT_NE(desc(9216, DType::BF16).find("3 slices of K 3072"), std::string::npos) << desc(9216, DType::BF16);
  EXPECT_NE(desc(8292, DType::BF16).find("3 slices of K 2816"), std::string::npos) << desc(8292, DType::BF16);
  EXPECT_NE(desc(4160, DType::BF16).find("2 slices of K 2112"), std::string::npos) << desc(4160, DType::BF16);
}

// Every oneDNN matmul executes with its calling thread's one scratchpad (user mode), grown to the
// largest: many linears and shapes allocate at most once per growth, and repeating the calls (the
// steps of a denoising loop) allocates nothing. (On AVX2 the f32 gemm:jit kernels may need none.)
TEST(LinearOneDnn, MatmulsShareTheThreadsScratchpad) {
  std::vector<std::shared_ptr<backend::PreparedLinear>> linears;
  for (int i = 0; i < 6; ++i)
    linears.push_back(backend::prepare_linear_cpu_with(random_normal({96 + 32 * i, 128}, DType::F32, 40 + i),
                                                       Tensor(), backend::CpuLinearImpl::OneDnn));
  auto run_all = [&] {
    for (const auto& w : linears)
      for (int64_t m : {7, 300}) {
        backend::LinearArgs a;
        a.x = random_normal({m, 128}, DType::F32, 5);
        a.w = w.get();
        a.y = Tensor::empty({m, w->out_features()}, DType::F32);
        backend::linear_cpu(a);
      }
  };
  const int64_t start = backend::onednn::matmul_scratchpad_allocations();
  run_all();
  const int64_t first = backend::onednn::matmul_scratchpad_allocations() - start;
  EXPECT_LE(first, 12) << "at most one growth per call shape";
  run_all();
  run_all();
  EXPECT_EQ(backend::onednn::matmul_scratchpad_allocations() - start, first);
  RecordProperty("scratchpad_allocations", static_cast<int>(first));
}

// The AMX GEMM takes f32 and f16 activations against bf16 weights (rounded to bf16 as it packs
// them, as oneDNN's bf16 matmul does) and writes any output dtype, each through the epilogue.
TEST(LinearAmx, MixedActivationAndOutputDtypes) {
  if (!backend::gemm::amx_gemm_supported()) GTEST_SKIP() << "no AMX on this CPU";
  const Tensor w = random_normal({300, 200}, DType::BF16, 11, 0.0, 0.07);
  const Tensor b = random_normal({300}, DType::F32, 12);
  const auto p = backend::prepare_linear_cpu_with(w, b, backend::CpuLinearImpl::Amx);
  const auto r = backend::prepare_linear_ref(w, b);
  for (DType xdt : {DType::F32, DType::F16, DType::BF16}) {
    for (DType ydt : {DType::F32, DType::F16, DType::BF16}) {
      // The ref sees the activations as the AMX GEMM multiplies them: rounded to bf16.
      const Tensor x = random_normal({70, 200}, xdt, 13);
      backend::LinearArgs a;
      a.x = x;
      a.w = p.get();
      a.activation = backend::Activation::GeluTanh;
      a.y = Tensor::empty({70, 300}, ydt);
      backend::linear_cpu(a);
      backend::LinearArgs ra = a;
      ra.x = x.to(DType::BF16).to(DType::F32);
      ra.w = r.get();
      ra.y = Tensor::empty({70, 300}, DType::F32);
      backend::linear_ref(ra);
      EXPECT_TRUE(all_close(a.y, ra.y, TolClass::Gemm)) << dtype_name(xdt) << " -> " << dtype_name(ydt);
    }
  }
}

TEST(LinearActivations, ExtremeInputs) {
  std::vector<float> xs;
  for (int i = -400; i <= 400; ++i) xs.push_back(i * 0.25f);
  const int64_t m = static_cast<int64_t>(xs.size());
  const Tensor x = Tensor::from_vector(xs, {m, 1}, DType::F32);
  const Tensor w = Tensor::from_vector({1.0f}, {1, 1}, DType::F32);
  for (auto impl : impls()) {
    for (auto act : {backend::Activation::GeluTanh, backend::Activation::Silu}) {
      auto p = backend::prepare_linear_cpu_with(w, Tensor(), impl_named(impl));
      backend::LinearArgs a;
      a.x = x;
      a.w = p.get();
      a.activation = act;
      a.y = Tensor::empty({m, 1}, DType::F32);
      backend::linear_cpu(a);
      for (int64_t i = 0; i < m; ++i) {
        const double want = backend::apply_activation_ref(act, xs[i]);
        EXPECT_NEAR(a.y.item({i, 0}), want, 2e-6 * std::max(1.0, std::abs(want)))
            << impl << " act " << static_cast<int>(act) << " x=" << xs[i];
      }
    }
  }
}

TEST(LinearOps, LeadingDimsAndBothTables) {
  const Tensor w = random_normal({48, 32}, DType::BF16, 1, 0.0, 0.2);
  const Tensor b = random_normal({48}, DType::BF16, 2);
  const Tensor x = random_normal({2, 5, 32}, DType::BF16, 3);
  auto cpu = ops::prepare_linear(w, b);
  const Tensor y = ops::linear(x, *cpu, ops::Activation::Silu);
  ASSERT_EQ(y.shape(), (Shape{2, 5, 48}));
  EXPECT_EQ(y.dtype(), DType::BF16);
  Tensor ref;
  {
    ops::ScopedKernelTable force(backend::ref_kernels());
    auto r = ops::prepare_linear(w, b);
    ref = Tensor::empty({2, 5, 48}, DType::F32);
    ops::linear_into(x.to(DType::F32), *r, ref, ops::Activation::Silu);
  }
  EXPECT_TRUE(all_close(y, ref, TolClass::Gemm));
}

TEST(LinearOps, GatedResidualInPlace) {
  const Tensor w = random_normal({64, 40}, DType::F32, 4, 0.0, 0.2);
  const Tensor h = random_normal({3, 7, 40}, DType::F32, 5);
  const Tensor gate = random_normal({64}, DType::F32, 6);
  Tensor x = random_normal({3, 7, 64}, DType::F32, 7);
  const Tensor x0 = x.clone();
  auto p = ops::prepare_linear(w);
  ops::linear_gated_residual_into(h, *p, gate, x, x);  // x += gate * (h @ W^T)
  Tensor expect;
  {
    ops::ScopedKernelTable force(backend::ref_kernels());
    auto r = ops::prepare_linear(w);
    expect = ops::linear_gated_residual(h, *r, gate, x0);
  }
  EXPECT_TRUE(all_close(x, expect, TolClass::Gemm));
}

TEST(LinearOps, StridedRowsWithoutCopy) {
  // q = first third of a fused qkv tensor's columns: a 2-D view with stride(0) = 3K.
  const Tensor qkv = random_normal({9, 3 * 32}, DType::BF16, 8);
  const Tensor q = qkv.narrow(1, 0, 32);
  const Tensor w = random_normal({16, 32}, DType::BF16, 9, 0.0, 0.2);
  auto p = ops::prepare_linear(w);
  const Tensor y = ops::linear(q, *p);
  auto r = ops::prepare_linear(w);
  const Tensor y2 = ops::linear(q.contiguous(), *r);
  EXPECT_TRUE(all_close(y, y2, TolClass::Exact));
}

TEST(LinearOps, ZeroRows) {
  auto p = ops::prepare_linear(random_normal({8, 4}, DType::BF16, 1));
  const Tensor y = ops::linear(Tensor::empty({0, 4}, DType::BF16), *p);
  EXPECT_EQ(y.shape(), (Shape{0, 8}));
}

TEST(LinearOps, Errors) {
  auto p = ops::prepare_linear(random_normal({8, 4}, DType::F32, 1));
  EXPECT_THROW(ops::linear(random_normal({2, 5}, DType::F32, 2), *p), Error);
  EXPECT_THROW(ops::prepare_linear(random_normal({8}, DType::F32, 1)), Error);
  EXPECT_THROW(ops::prepare_linear(random_normal({8, 4}, DType::F32, 1), random_normal({7}, DType::F32, 1)), Error);
  EXPECT_THROW(ops::linear_into(random_normal({2, 4}, DType::F32, 2), *p, Tensor::empty({2, 9}, DType::F32)), Error);
  try {
    ops::linear(random_normal({2, 5}, DType::F32, 2), *p);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[linear]"), std::string::npos);
  }
}

}  // namespace
}  // namespace fluxrt::test
