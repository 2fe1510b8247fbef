// Which oneDNN implementation the CPU convolution lands on for every convolution of the FLUX VAEs
// (FLUX.1 and FLUX.2 share the layout: 128/256/512 channels over four levels) at the image sizes
// people decode, in both passes and in the lean pass's bands. oneDNN answers a descriptor that no
// JIT kernel accepts with its scalar reference convolution, silently: on an AMX Xeon the weight
// layout prepared at 64x64 was refused by brgconv at 256x256 and a 512x512 decode ran for more
// than 10 minutes instead of seconds. So this test asks conv2d_cpu_kernel_for — the
// impl_info_str of the primitive conv2d_cpu would run, nothing computed — and fails on "ref".
// Inputs are broadcast views (stride 0): only their shapes are read.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/conv_cpu.h"
#include "backend/cpu/linear_cpu.h"
#include "backend/cpu/onednn_util.h"
#include "core/strict_kernels.h"

namespace fluxrt::test {
namespace {

struct ConvShape {
  const char* name;
  int64_t cin, cout, k;
  int64_t divisor;  // spatial size = image size / divisor
  bool upsample = false, downsample = false, residual = false;
};

// The decoder's and encoder's convolutions, one of each (cin, cout, kernel, level, kind).
const ConvShape kVaeConvs[] = {
    {"decoder conv_in (32 latent channels)", 32, 512, 3, 8},
    {"decoder conv_in (16 latent channels)", 16, 512, 3, 8},
    {"post_quant_conv", 32, 32, 1, 8},
    {"mid / level-3 resnet conv", 512, 512, 3, 8},
    {"mid resnet conv2 + skip", 512, 512, 3, 8, false, false, true},
    {"level-3 upsample conv", 512, 512, 3, 4, true},
    {"level-2 resnet conv", 512, 512, 3, 4},
    {"level-2 upsample conv", 512, 512, 3, 2, true},
    {"level-1 resnet conv1 512->256", 512, 256, 3, 2},
    {"level-1 shortcut 1x1", 512, 256, 1, 2},
    {"level-1 resnet conv2 + skip", 256, 256, 3, 2, false, false, true},
    {"level-1 upsample conv", 256, 256, 3, 1, true},
    {"level-0 resnet conv1 256->128", 256, 128, 3, 1},
    {"level-0 shortcut 1x1", 256, 128, 1, 1},
    {"level-0 resnet conv2 + skip", 128, 128, 3, 1, false, false, true},
    {"decoder conv_out", 128, 3, 3, 1},
    {"encoder conv_in", 3, 128, 3, 1},
    {"level-0 downsample", 128, 128, 3, 1, false, true},
    {"level-1 resnet conv1 128->256", 128, 256, 3, 2},
    {"level-1 shortcut 128->256", 128, 256, 1, 2},
    {"level-1 downsample", 256, 256, 3, 2, false, true},
    {"level-2 resnet conv1 256->512", 256, 512, 3, 4},
    {"level-2 downsample", 512, 512, 3, 4, false, true},
    {"encoder conv_out (2 x 32 channels)", 512, 64, 3, 8},
    {"quant_conv", 64, 64, 1, 8},
};

backend::Conv2dArgs args_for(const ConvShape& c, const backend::PreparedConv2d& w, int64_t h, int64_t wd,
                             DType dt, int pad_top, int pad_bottom) {
  backend::Conv2dArgs a;
  a.w = &w;
  const int64_t in_h = c.upsample ? h / 2 : h, in_w = c.upsample ? wd / 2 : wd;
  a.x = Tensor::empty({1, 1, 1, 1}, dt).expand(Shape{1, c.cin, in_h, in_w});
  a.upsample_nearest_2x = c.upsample;
  if (c.downsample) {
    a.stride = 2;
    a.pad_bottom = 1;
    a.pad_right = 1;
  } else {
    const int pad = static_cast<int>(c.k / 2);
    a.pad_top = pad_top < 0 ? pad : pad_top;
    a.pad_bottom = pad_bottom < 0 ? pad : pad_bottom;
    a.pad_left = a.pad_right = pad;
  }
  const int64_t ho = (h + a.pad_top + a.pad_bottom - c.k) / a.stride + 1;
  const int64_t wo = (wd + a.pad_left + a.pad_right - c.k) / a.stride + 1;
  a.y = Tensor::empty({1, 1, 1, 1}, dt).expand(Shape{1, c.cout, ho, wo});
  if (c.residual) a.residual = a.y;
  return a;
}

TEST(ConvKernelChoice, NoFluxVaeConvolutionUsesTheReferenceConvolution) {
  int checked = 0;
  std::set<std::string> kernels;
  const int before = backend::onednn::reference_primitive_count();
  for (DType dt : {DType::F32, DType::BF16}) {
    // bf16 weights compute in f32 without native bf16: the same primitives as f32.
    if (dt == DType::BF16 && !backend::cpu_native_bf16()) continue;
    for (const ConvShape& c : kVaeConvs) {
      const Tensor w = Tensor::full({c.cout, c.cin, c.k, c.k}, dt, 0.01);
      const Tensor b = Tensor::full({c.cout}, dt, 0.0);
      const auto prepared = backend::prepare_conv2d_cpu(w, b);
      for (int64_t image : {256, 512, 1024, 2048}) {
        const int64_t s = image / c.divisor;
        std::vector<backend::Conv2dArgs> calls = {args_for(c, *prepared, s, s, dt, -1, -1)};
        if (!c.downsample && !c.upsample && c.k == 3) {
          // The lean pass's bands: 16 output rows with a halo, at the image's top, middle, bottom.
          calls.push_back(args_for(c, *prepared, 17, s, dt, 1, 0));
          calls.push_back(args_for(c, *prepared, 18, s, dt, 0, 0));
          calls.push_back(args_for(c, *prepared, 17, s, dt, 0, 1));
        }
        for (const backend::Conv2dArgs& a : calls) {
          const std::string kernel = backend::conv2d_cpu_kernel_for(a);
          SCOPED_TRACE(::testing::Message()
                       << c.name << " " << dtype_name(dt) << " input " << a.x.shape().str() << " pads "
                       << a.pad_top << "," << a.pad_bottom << ": " << kernel);
          EXPECT_FALSE(backend::onednn::is_reference_impl(kernel));
          kernels.insert(kernel);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_EQ(backend::onednn::reference_primitive_count(), before);
  for (const std::string& k : kernels) std::printf("[kernel] %s\n", k.c_str());
}

TEST(ConvKernelChoice, ReferenceImplementationNamesAreRecognised) {
  for (const char* ref : {"ref:any", "ref_int8:any", "gemm:ref", "ref_fused:any"}) {
    EXPECT_TRUE(backend::onednn::is_reference_impl(ref)) << ref;
  }
  for (const char* jit : {"brgconv:avx512_core_amx_bf16", "jit:avx2", "gemm:jit", "brg:avx512_core_bf16",
                          "jit_uni_dw:avx2", "brgconv_1x1:avx512_core", ""}) {
    EXPECT_FALSE(backend::onednn::is_reference_impl(jit)) << jit;
  }
}

// A reference implementation is counted, and is an error naming it under strict mode.
TEST(ConvKernelChoice, ReferenceImplementationIsAnErrorUnderStrictMode) {
  const bool was = strict_kernels();
  const int before = backend::onednn::reference_primitive_count();
  set_strict_kernels(false);
  backend::onednn::check_implementation("conv2d", "jit:avx2", "f32 test shape");
  EXPECT_EQ(backend::onednn::reference_primitive_count(), before);
  backend::onednn::check_implementation("conv2d", "ref:any", "f32 test shape");
  EXPECT_EQ(backend::onednn::reference_primitive_count(), before + 1);
  set_strict_kernels(true);
  try {
    backend::onednn::check_implementation("conv2d", "ref:any", "f32 test shape");
    ADD_FAILURE() << "no error under strict mode";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("ref:any"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32 test shape"), std::string::npos) << e.what();
  }
  set_strict_kernels(was);
}

}  // namespace
}  // namespace fluxrt::test
