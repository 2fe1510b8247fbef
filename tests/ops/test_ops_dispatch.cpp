// The dispatch layer: table selection, scoped override, the composed-fallback policy (log once,
// Unsupported under FLUXRT_STRICT_KERNELS=1) and the fallbacks' results.
#include "conformance_common.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/vae_ops.h"

namespace fluxrt::test {
namespace {

// A CPU table with the fused kernels removed, to force the composed fallbacks.
const backend::KernelTable& cpu_without_fusions() {
  static const backend::KernelTable t = [] {
    backend::KernelTable k = backend::cpu_kernels();
    k.name = "cpu-nofuse";
    k.adaln_modulate = nullptr;
    k.gated_residual = nullptr;
    k.glu = nullptr;
    k.upsample_nearest_2x = nullptr;
    return k;
  }();
  return t;
}

struct StrictGuard {
  explicit StrictGuard(bool on) : was(ops::strict_kernels()) { ops::set_strict_kernels(on); }
  ~StrictGuard() { ops::set_strict_kernels(was); }
  bool was;
};

TEST(Dispatch, CpuTensorsUseCpuTable) {
  EXPECT_STREQ(ops::kernels_for(Tensor::zeros({2}, DType::F32)).name, "cpu");
  {
    ops::ScopedKernelTable ref(backend::ref_kernels());
    EXPECT_STREQ(ops::kernels_for(Device::cpu()).name, "ref");
    {
      ops::ScopedKernelTable nested(backend::cpu_kernels());
      EXPECT_STREQ(ops::kernels_for(Device::cpu()).name, "cpu");
    }
    EXPECT_STREQ(ops::kernels_for(Device::cpu()).name, "ref");
  }
  EXPECT_STREQ(ops::kernels_for(Device::cpu()).name, "cpu");
}

TEST(Dispatch, CudaWithoutCudaIsUnsupported) {
  if (cuda::built_with_cuda()) GTEST_SKIP() << "built with CUDA";
  try {
    backend::kernels_for(Device::cuda(0));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
}

TEST(Dispatch, EveryOwnSlotFilled) {
  for (const auto* t : {&backend::ref_kernels(), &backend::cpu_kernels()}) {
    EXPECT_TRUE(t->unary && t->binary && t->glu && t->gated_residual && t->softmax && t->embedding) << t->name;
    EXPECT_TRUE(t->adaln_modulate && t->layer_norm && t->rms_norm) << t->name;
    EXPECT_TRUE(t->group_norm && t->upsample_nearest_2x && t->channel_norm) << t->name;
  }
}

TEST(Fallback, ComposedVersionsMatchRef) {
  StrictGuard strict(false);
  const Tensor x = random_normal({2, 5, 40}, DType::F32, 1), y = random_normal({2, 5, 40}, DType::F32, 2);
  const Tensor mod = random_normal({2, 120}, DType::F32, 3, 0, 0.5);
  const Tensor shift = mod.narrow(1, 0, 40), scale = mod.narrow(1, 40, 40), gate = mod.narrow(1, 80, 40);
  const Tensor img = random_normal({1, 3, 4, 5}, DType::F32, 4);
  auto all = [&] {
    return std::vector<Tensor>{ops::adaln_modulate(x, shift, scale), ops::gated_residual(x, gate, y), ops::swiglu(x),
                               ops::gated_gelu(x, y), ops::upsample_nearest_2x(img)};
  };
  const auto r = run_on("ref", all);
  const int before = ops::fallback_count("adaln_modulate");
  std::vector<Tensor> f;
  {
    ops::ScopedKernelTable scope(cpu_without_fusions());
    f = all();
  }
  EXPECT_EQ(ops::fallback_count("adaln_modulate"), before + 1);
  EXPECT_GE(ops::fallback_count("gated_residual"), 1);
  EXPECT_GE(ops::fallback_count("swiglu"), 1);
  // The fallbacks round intermediates, so they get the norm-class bound even for modulate.
  for (size_t i = 0; i < r.size(); ++i) EXPECT_TRUE(all_close(f[i], r[i], TolClass::Norm)) << "op " << i;
}

TEST(Fallback, GluIntoAStridedOutputWithAndWithoutTheKernel) {
  StrictGuard strict(false);
  const Tensor x = random_normal({2, 3, 32}, DType::F32, 5);
  const Tensor expected = ops::swiglu(x);
  for (const backend::KernelTable* table : {&backend::cpu_kernels(), &cpu_without_fusions()}) {
    ops::ScopedKernelTable scope(*table);
    Tensor buffer = Tensor::zeros({2, 3, 21}, DType::F32);
    ops::swiglu_into(x, buffer.narrow(2, 5, 16));
    EXPECT_TRUE(all_close(buffer.narrow(2, 5, 16), expected, TolClass::Elementwise)) << table->name;
    EXPECT_TRUE(all_close(buffer.narrow(2, 0, 5), Tensor::zeros({2, 3, 5}, DType::F32), TolClass::Exact));
    EXPECT_THROW(ops::swiglu_into(x, buffer.narrow(2, 5, 16).to(DType::BF16)), Error);  // dtype
  }
}

TEST(Fallback, StrictModeRefusesFallbacks) {
  StrictGuard strict(true);
  ops::ScopedKernelTable scope(cpu_without_fusions());
  const Tensor x = random_normal({1, 2, 8}, DType::F32, 1);
  const Tensor v = Tensor::zeros({1, 8}, DType::F32);
  try {
    ops::adaln_modulate(x, v, v);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("[adaln_modulate]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("FLUXRT_STRICT_KERNELS"), std::string::npos) << e.what();
  }
}

TEST(Fallback, MissingNonFusedKernelIsUnsupported) {
  backend::KernelTable empty;
  empty.name = "empty";
  ops::ScopedKernelTable scope(empty);
  try {
    ops::rms_norm(Tensor::zeros({2, 8}, DType::F32), Tensor(), 1e-6f);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("[rms_norm] not implemented by the empty backend"), std::string::npos)
        << e.what();
  }
}

TEST(OpErrors, RejectNonFloat) {
  EXPECT_THROW(ops::silu(Tensor::zeros({4}, DType::I32)), Error);
  EXPECT_THROW(ops::swiglu(Tensor::zeros({2, 5}, DType::F32)), Error);
  EXPECT_THROW(ops::add(Tensor::zeros({2, 5}, DType::F32), Tensor::zeros({3}, DType::F32)), Error);
}

}  // namespace
}  // namespace fluxrt::test
