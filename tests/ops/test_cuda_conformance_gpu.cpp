// The CUDA kernel table against the ref table: every slot on random inputs in f32, bf16 and f16,
// contiguous and strided/misaligned views, with the tolerances of docs/numerics.md (the same
// compare helper and classes as the CPU conformance tests). Skips without a GPU.
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/kernel_table.h"
#include "cuda_test_util.h"
#include "ops/conv.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/vae_ops.h"
#include "support/compare.h"
#include "support/random_tensor.h"

namespace fluxrt::test {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs fn on host inputs with the ref table and on device mirrors with the CUDA table.
void check(const std::vector<Input>& inputs, TolClass tol, const Fn& fn, const std::string& what) {
  SCOPED_TRACE(what);
  std::vector<Tensor> host, dev;
  for (const auto& in : inputs) {
    host.push_back(in.host());
    dev.push_back(in.device());
  }
  Tensor ref;
  {
    ops::ScopedKernelTable scope(backend::ref_kernels());
    ref = fn(host);
  }
  const Tensor got = to_host(fn(dev));
  cuda::synchronize(0);
  EXPECT_TRUE(all_close(got, ref, tol)) << what;
}

const std::vector<DType> kDtypes{DType::F32, DType::BF16, DType::F16};

std::string name(DType d, const Shape& s, const std::string& v = "") {
  return std::string(dtype_name(d)) + " " + s.str() + (v.empty() ? "" : " " + v);
}

// A view of shape s whose rows are padded and start one element in: strided and 16-byte misaligned.
Input strided_input(const Shape& s, DType d, uint64_t seed, double lo = -4, double hi = 4) {
  Shape padded = s;
  padded[padded.size() - 1] += 3;
  const int64_t cols = s[s.size() - 1];
  return Input{random_uniform(padded, d, seed, lo, hi), [cols](const Tensor& t) { return t.narrow(-1, 1, cols); }};
}

TEST(CudaConformance, Unary) {
  FLUXRT_REQUIRE_GPU();
  for (DType d : kDtypes)
    for (const Shape& s : {Shape{3, 7}, Shape{4, 1000}, Shape{2, 3, 128}, Shape{1, 40000}})
      for (bool strided : {false, true}) {
        const Input x = strided ? strided_input(s, d, 1, -12, 12) : Input{random_uniform(s, d, 1, -12, 12)};
        const auto v = strided ? "strided" : "";
        check({x}, TolClass::Transcendental, [](auto& t) { return ops::silu(t[0]); }, "silu " + name(d, s, v));
        check({x}, TolClass::Transcendental, [](auto& t) { return ops::gelu_tanh(t[0]); }, "gelu " + name(d, s, v));
        check({x}, TolClass::Transcendental, [](auto& t) { return ops::quick_gelu(t[0]); }, "qgelu " + name(d, s, v));
        check({x}, TolClass::Elementwise, [](auto& t) { return ops::scale(t[0], 0.0883883476f); }, "scale " + name(d, s, v));
      }
}

TEST(CudaConformance, Binary) {
  FLUXRT_REQUIRE_GPU();
  for (DType d : kDtypes)
    for (const Shape& s : {Shape{3, 7}, Shape{4, 129}, Shape{2, 40000}, Shape{2, 5, 64}}) {
      const Input a{random_normal(s, d, 2)}, b{random_normal(s, d, 3)};
      const Input row{random_normal({s[s.size() - 1]}, d, 4)};
      const Input col{random_normal({s[0], 1}, d, 5)};
      for (bool add : {true, false}) {
        auto f = [add](auto& t) { return add ? ops::add(t[0], t[1]) : ops::mul(t[0], t[1]); };
        check({a, b}, TolClass::Elementwise, f, std::string(add ? "add " : "mul ") + name(d, s));
        check({a, row}, TolClass::Elementwise, f, std::string(add ? "add row " : "mul row ") + name(d, s));
        if (s.size() == 2) check({a, col}, TolClass::Elementwise, f, std::string(add ? "add col " : "mul col ") + name(d, s));
        check({strided_input(s, d, 6), b}, TolClass::Elementwise, f, std::string("strided ") + name(d, s));
      }
    }
}

TEST(CudaConformance, GluAndGatedResidual) {
  FLUXRT_REQUIRE_GPU();
  for (DType d : kDtypes) {
    for (const Shape& s : {Shape{3, 7}, Shape{4, 1000}, Shape{1, 64, 9216}}) {
      Shape s2 = s;
      s2[s2.size() - 1] *= 2;
      check({Input{random_uniform(s2, d, 7, -8, 8)}}, TolClass::Transcendental, [](auto& t) { return ops::swiglu(t[0]); },
            "swiglu " + name(d, s));
      check({Input{random_uniform(s, d, 8, -8, 8)}, Input{random_normal(s, d, 9)}}, TolClass::Transcendental,
            [](auto& t) { return ops::gated_gelu(t[0], t[1]); }, "gated_gelu " + name(d, s));
    }
    for (const Shape& s : {Shape{1, 5, 64}, Shape{2, 19, 3072}, Shape{2, 3, 129}}) {
      const int64_t B = s[0], D = s[2];
      const Input gate{random_normal({B, 6 * D}, d, 10), [D](const Tensor& t) { return t.narrow(1, 2 * D, D); }};
      check({Input{random_normal(s, d, 11)}, gate, Input{random_normal(s, d, 12)}}, TolClass::Elementwise,
            [](auto& t) { return ops::gated_residual(t[0], t[1], t[2]); }, "gated_residual " + name(d, s));
    }
  }
}

TEST(CudaConformance, SoftmaxAndEmbedding) {
  FLUXRT_REQUIRE_GPU();
  for (DType d : kDtypes) {
    for (const Shape& s : {Shape{3, 7}, Shape{4, 1000}, Shape{2, 5000}, Shape{2, 3, 77}})
      check({Input{random_normal(s, d, 13, 0, 3)}}, TolClass::Norm, [](auto& t) { return ops::softmax(t[0]); },
            "softmax " + name(d, s));
    for (DType ids_t : {DType::I32, DType::I64})
      check({Input{random_normal({50, 64}, d, 14)}, Input{random_ids({3, 5}, ids_t, 15, 50)}}, TolClass::Exact,
            [d](auto& t) { return ops::embedding(t[0], t[1], d); }, "embedding " + name(d, {50, 64}));
  }
  // An fp8 checkpoint's table is read as stored (the device decodes e4m3fn / e5m2 bit for bit).
  for (DType table_t : {DType::F8E4M3, DType::F8E5M2})
    for (DType out_t : kDtypes)
      check({Input{random_normal({50, 64}, table_t, 16, 0, 40)}, Input{random_ids({4, 6}, DType::I64, 17, 50)}},
            TolClass::Exact, [out_t](auto& t) { return ops::embedding(t[0], t[1], out_t); },
            "embedding " + std::string(dtype_name(table_t)) + " table -> " + std::string(dtype_name(out_t)));
}

TEST(CudaConformance, EmbeddingRejectsOutOfRangeIds) {
  FLUXRT_REQUIRE_GPU();
  const Tensor table = to_cuda(random_normal({10, 8}, DType::F32, 1));
  const Tensor ids = to_cuda(Tensor::from_vector({1, 10}, {2}, DType::I64));
  EXPECT_THROW(ops::embedding(table, ids, DType::F32), Error);
}

TEST(CudaConformance, Norms) {
  FLUXRT_REQUIRE_GPU();
  for (DType d : kDtypes) {
    for (const Shape& s : {Shape{1, 7, 64}, Shape{2, 19, 3072}, Shape{1, 3, 5000}}) {
      const int64_t B = s[0], D = s[2];
      const Input shift{random_normal({B, 6 * D}, d, 16), [D](const Tensor& t) { return t.narrow(1, 0, D); }};
      const Input scl{random_normal({B, 6 * D}, d, 17), [D](const Tensor& t) { return t.narrow(1, D, D); }};
      check({Input{random_normal(s, d, 18, 0.5, 2)}, shift, scl}, TolClass::Norm,
            [](auto& t) { return ops::adaln_modulate(t[0], t[1], t[2]); }, "adaln " + name(d, s));
    }
    for (const Shape& s : {Shape{3, 129}, Shape{2, 5000}, Shape{2, 4, 768}}) {
      const int64_t D = s[s.size() - 1];
      const Input x{random_normal(s, d, 19, 1, 2)}, w{random_normal({D}, d, 20)}, b{random_normal({D}, d, 21)};
      check({x, w, b}, TolClass::Norm, [](auto& t) { return ops::layer_norm(t[0], t[1], t[2], 1e-5f); },
            "layer_norm " + name(d, s));
      check({x}, TolClass::Norm, [](auto& t) { return ops::layer_norm(t[0], Tensor(), Tensor(), 1e-6f); },
            "layer_norm plain " + name(d, s));
      check({strided_input(s, d, 22), w, b}, TolClass::Norm,
            [](auto& t) { return ops::layer_norm(t[0], t[1], t[2], 1e-5f); }, "layer_norm strided " + name(d, s));
    }
    for (const Shape& s : {Shape{2, 5, 4, 128}, Shape{3, 3072}, Shape{1, 2, 4096}}) {
      const int64_t D = s[s.size() - 1];
      const Input x{random_normal(s, d, 23)}, w{random_normal({D}, d, 24)};
      for (auto r : {ops::RmsRounding::Once, ops::RmsRounding::BeforeWeight})
        check({x, w}, TolClass::Norm, [r](auto& t) { return ops::rms_norm(t[0], t[1], 1e-6f, r); },
              "rms_norm " + name(d, s, r == ops::RmsRounding::Once ? "once" : "before_weight"));
    }
  }
}

TEST(CudaConformance, VaeOps) {
  FLUXRT_REQUIRE_GPU();
  for (DType d : kDtypes) {
    for (const Shape& s : {Shape{1, 64, 9, 11}, Shape{2, 32, 64, 64}, Shape{1, 128, 128, 128}}) {
      const int64_t C = s[1];
      const Input x{random_normal(s, d, 25, 0.3, 1.5)}, w{random_normal({C}, d, 26)}, b{random_normal({C}, d, 27)};
      for (bool silu : {false, true})
        check({x, w, b}, TolClass::Norm, [silu](auto& t) { return ops::group_norm(t[0], t[1], t[2], 32, 1e-6f, silu); },
              "group_norm " + name(d, s, silu ? "silu" : ""));
    }
    check({Input{random_normal({1, 3, 5, 7}, d, 28)}}, TolClass::Exact,
          [](auto& t) { return ops::upsample_nearest_2x(t[0]); }, "upsample " + name(d, {1, 3, 5, 7}));
    const Input lat{random_normal({2, 32, 8, 8}, d, 29)}, mean{random_normal({32}, DType::F32, 30)},
        var{random_uniform({32}, DType::F32, 31, 0.1, 3)};
    check({lat, mean, var}, TolClass::Norm, [](auto& t) { return ops::latent_normalize(t[0], t[1], t[2]); },
          "latent_normalize " + name(d, {2, 32, 8, 8}));
    check({lat, mean, var}, TolClass::Norm, [](auto& t) { return ops::latent_denormalize(t[0], t[1], t[2]); },
          "latent_denormalize " + name(d, {2, 32, 8, 8}));
  }
}

// Linear: weights prepared by each table (the CUDA one uploads them), every epilogue.
TEST(CudaConformance, Linear) {
  FLUXRT_REQUIRE_GPU();
  struct Dims { int64_t m, k, n; };
  for (DType d : kDtypes)
    for (Dims dm : {Dims{7, 64, 96}, Dims{130, 256, 200}, Dims{300, 1024, 768}})
      for (bool with_bias : {false, true})
        for (auto act : {backend::Activation::None, backend::Activation::GeluTanh, backend::Activation::Silu}) {
          const Tensor w = random_normal({dm.n, dm.k}, d, 32, 0, 1.0 / std::sqrt(double(dm.k)));
          const Tensor b = with_bias ? random_normal({dm.n}, d, 33) : Tensor();
          const std::string what = name(d, {dm.m, dm.k, dm.n}, std::string(with_bias ? "bias " : "") +
                                                                   std::to_string(static_cast<int>(act)));
          auto f = [&](auto& t) {
            const Device dev = t[0].device();
            const auto prepared = ops::prepare_linear(w, b, dev);
            return ops::linear(t[0], *prepared, act);
          };
          check({Input{random_normal({dm.m, dm.k}, d, 34)}}, TolClass::Gemm, f, "linear " + what);
          // Gated residual epilogue (FLUX): residual + gate * (x W^T + b).
          auto g = [&](auto& t) {
            const auto prepared = ops::prepare_linear(w, b, t[0].device());
            return ops::linear_gated_residual(t[0], *prepared, t[1], t[2], act);
          };
          check({Input{random_normal({dm.m, dm.k}, d, 35)}, Input{random_normal({dm.n}, d, 36)},
                 Input{random_normal({dm.m, dm.n}, d, 37)}},
                TolClass::Gemm, g, "linear gated " + what);
        }
  // Mixed dtypes: f32 activations on bf16 weights run in f32.
  const Tensor w = random_normal({96, 64}, DType::BF16, 38, 0, 0.125);
  check({Input{random_normal({9, 64}, DType::F32, 39)}}, TolClass::Gemm,
        [&](auto& t) { return ops::linear(t[0], *ops::prepare_linear(w, Tensor(), t[0].device())); }, "linear f32 x bf16");
  // Shapes and views the model shapes above do not reach: a modulation-like M=2, K=12288 (where
  // cuBLASLt likes split-K: its partial sums must stay f32), rows padded and starting one element
  // in (2-byte aligned: the fused epilogue may have no algorithm and fall back), one row whose
  // stride is below K (a transposed column), and broadcast rows (stride 0).
  for (DType d : {DType::BF16, DType::F16}) {
    const Tensor wide = random_normal({3072, 12288}, d, 50, 0, 1.0 / std::sqrt(12288.0));
    const Tensor wide_b = random_normal({3072}, d, 51);
    check({Input{random_normal({2, 12288}, d, 52)}}, TolClass::Gemm,
          [&](auto& t) { return ops::linear(t[0], *ops::prepare_linear(wide, wide_b, t[0].device())); },
          "linear split-K prone " + name(d, {2, 12288, 3072}));
    const Tensor w2 = random_normal({96, 64}, d, 53, 0, 0.125), b2 = random_normal({96}, d, 54);
    for (auto act : {backend::Activation::None, backend::Activation::GeluTanh})
      check({strided_input({33, 64}, d, 55)}, TolClass::Gemm,
            [&](auto& t) { return ops::linear(t[0], *ops::prepare_linear(w2, b2, t[0].device()), act); },
            "linear misaligned rows " + name(d, {33, 64}));
    check({Input{random_normal({64, 1}, d, 56), [](const Tensor& t) { return t.transpose(0, 1); }}}, TolClass::Gemm,
          [&](auto& t) { return ops::linear(t[0], *ops::prepare_linear(w2, b2, t[0].device())); },
          "linear one row, stride 1 " + name(d, {1, 64}));
    check({Input{random_normal({1, 64}, d, 57), [](const Tensor& t) { return t.expand({5, 64}); }}}, TolClass::Gemm,
          [&](auto& t) { return ops::linear(t[0], *ops::prepare_linear(w2, b2, t[0].device())); },
          "linear broadcast rows " + name(d, {5, 64}));
  }
}

// The cuBLASLt GELU epilogue's formula against the reference GELU-tanh, element-wise: W = I makes
// y = gelu(x + b), so an epilogue that uses another GELU approximation fails the element-wise
// tolerance here even when it would hide inside a GEMM tolerance.
TEST(CudaConformance, GeluEpilogueFormula) {
  FLUXRT_REQUIRE_GPU();
  for (DType d : {DType::F32, DType::BF16}) {
    std::vector<float> eye(64 * 64, 0.0f);
    for (int i = 0; i < 64; ++i) eye[i * 64 + i] = 1.0f;
    const Tensor w = Tensor::from_vector(eye, {64, 64}, d);
    const Tensor b = random_uniform({64}, d, 40, -1, 1);
    check({Input{random_uniform({256, 64}, d, 41, -6, 6)}}, TolClass::Transcendental,
          [&](auto& t) {
            return ops::linear(t[0], *ops::prepare_linear(w, b, t[0].device()), backend::Activation::GeluTanh);
          },
          std::string("gelu epilogue ") + std::string(dtype_name(d)) +
              " (if this fails, set FLUXRT_CUDA_GELU_EPILOGUE=0 as the default in cuda_linear.cpp)");
  }
}

TEST(CudaConformance, Conv2d) {
  FLUXRT_REQUIRE_GPU();
  struct ConvCase {
    Shape x, w;
    ops::Conv2dOptions opt;
    bool residual;
    std::string what;
  };
  const std::vector<ConvCase> cases{
      {{1, 32, 17, 19}, {64, 32, 3, 3}, ops::Conv2dOptions::same(3), false, "3x3 same"},
      {{2, 16, 16, 16}, {16, 16, 3, 3}, ops::Conv2dOptions::same(3), true, "3x3 residual"},
      {{1, 32, 16, 18}, {32, 32, 3, 3}, ops::Conv2dOptions::downsample(), false, "3x3 stride 2 pad (0,1,0,1)"},
      {{1, 8, 9, 7}, {16, 8, 1, 1}, ops::Conv2dOptions{}, false, "1x1"},
      {{1, 16, 8, 8}, {16, 16, 3, 3}, [] { auto o = ops::Conv2dOptions::same(3); o.upsample_nearest_2x = true; return o; }(),
       false, "upsample + 3x3"},
  };
  for (DType d : kDtypes)
    for (const auto& c : cases)
      for (bool with_bias : {false, true}) {
        const Tensor w = random_normal(c.w, d, 42, 0, 1.0 / std::sqrt(double(c.w[1] * c.w[2] * c.w[3])));
        const Tensor b = with_bias ? random_normal({c.w[0]}, d, 43) : Tensor();
        std::vector<Input> in{Input{random_normal(c.x, d, 44)}};
        if (c.residual) {
          Shape ys = c.x;
          ys[1] = c.w[0];
          in.push_back(Input{random_normal(ys, d, 45)});
        }
        check(in, TolClass::Gemm,
              [&](auto& t) {
                const auto prepared = ops::prepare_conv2d(w, b, t[0].device());
                return ops::conv2d(t[0], *prepared, c.opt, t.size() > 1 ? t[1] : Tensor());
              },
              "conv2d " + c.what + " " + name(d, c.x, with_bias ? "bias" : ""));
      }
}

// Two threads convolving on one device at once (concurrent requests' VAE passes): cuDNN's handle
// is the device's, used by one thread at a time; every result equals the single-thread one.
TEST(CudaConformance, Conv2dFromTwoThreadsAtOnce) {
  FLUXRT_REQUIRE_GPU();
  const Tensor w = random_normal({32, 16, 3, 3}, DType::BF16, 60, 0, 0.1), b = random_normal({32}, DType::BF16, 61);
  const auto prepared = ops::prepare_conv2d(w, b, Device::cuda(0));
  const Tensor x = to_cuda(random_normal({1, 16, 48, 40}, DType::BF16, 62));
  const Tensor want = to_host(ops::conv2d(x, *prepared, ops::Conv2dOptions::same(3)));
  std::atomic<int> mismatches{0};
  auto work = [&] {
    for (int i = 0; i < 20; ++i) {
      const Tensor got = to_host(ops::conv2d(x, *prepared, ops::Conv2dOptions::same(3)));
      if (std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()) != 0) ++mismatches;
    }
  };
  std::thread a(work), c(work);
  a.join();
  c.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Memory: round trips through every copy path, device-side conversions, and a clear OOM error.
TEST(CudaMemory, CopiesAndConversions) {
  FLUXRT_REQUIRE_GPU();
  const Tensor h = random_normal({5, 300000}, DType::F32, 46);  // > the 1 MiB direct-copy limit: staged upload
  EXPECT_TRUE(all_close(to_host(to_cuda(h)), h, TolClass::Exact));
  const Tensor d = to_cuda(h);
  EXPECT_TRUE(all_close(to_host(d.to(DType::BF16)), h.to(DType::BF16), TolClass::Exact));  // device convert
  EXPECT_TRUE(all_close(to_host(d.transpose(0, 1).contiguous()), h.transpose(0, 1).contiguous(), TolClass::Exact));
  Tensor strided = Tensor::zeros({5, 300000}, DType::BF16, Device::cuda(0));
  strided.slice(1, 0, 300000, 2).copy_from(h.slice(1, 0, 300000, 2));  // host -> strided device view
  EXPECT_EQ(strided.item({2, 4}), static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(h.item({2, 4}))))));
  EXPECT_EQ(strided.item({2, 5}), 0.0);
}

// Device conversions with integers and fp8, bit for bit as the host converts: integers beyond
// f32's 24 bits (and int64 beyond double's 53), wrapping narrowings, out-of-range float -> int,
// fp8 widening.
TEST(CudaMemory, DeviceConversionsMatchHost) {
  FLUXRT_REQUIRE_GPU();
  auto ints = [](const std::vector<int64_t>& v) {
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::I64);
    for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
    return t;
  };
  const Tensor i64 = ints({16777217, -16777219, 3000000000, -5, 0, 1, 255, 256});
  const Tensor big = ints({(int64_t{1} << 53) + 1, -(int64_t{1} << 62) - 3});
  const Tensor floats = Tensor::from_vector({3.9f, -3.9f, 1e10f, -1e20f, 300.5f, -0.5f, 65504.0f, 1e-3f}, {8});
  const Tensor f8 = random_normal({64}, DType::F8E4M3, 58, 0, 50);
  const Tensor e5 = random_normal({64}, DType::F8E5M2, 59, 0, 500);
  // NaNs (f16 -> bf16 writes c10's 0x7FC0, f32 -> bf16 0xFFFF) and a bool byte other than 0/1.
  Tensor nan16 = Tensor::from_vector({1.0f, NAN, -2.0f, -NAN}, {4}, DType::F16);
  const Tensor nan32 = Tensor::from_vector({NAN, 1.5f, -NAN, 0.0f}, {4});
  Tensor odd_bool = Tensor::zeros({3}, DType::Bool);
  odd_bool.data<uint8_t>()[1] = 2;
  struct Case { Tensor src; std::vector<DType> to; std::string what; };
  const std::vector<Case> cases{
      {i64, {DType::I32, DType::I16, DType::I8, DType::U8, DType::Bool, DType::F32, DType::F64, DType::BF16, DType::F16},
       "i64"},
      {big, {DType::I32, DType::F32, DType::F64, DType::I16}, "i64 beyond 2^53"},
      {i64.to(DType::I32), {DType::I64, DType::F32, DType::F64, DType::I8}, "i32"},
      {floats, {DType::I64, DType::I32, DType::I16, DType::U8, DType::Bool}, "f32 -> integers"},
      {f8, {DType::F32, DType::BF16, DType::F16}, "f8e4m3"},
      {e5, {DType::F32, DType::BF16, DType::F16}, "f8e5m2"},
      {nan16, {DType::BF16, DType::F32}, "f16 NaN"},
      {nan32, {DType::BF16, DType::F16}, "f32 NaN"},
      {odd_bool, {DType::I32, DType::F32, DType::U8}, "bool byte 2"},
  };
  for (const Case& c : cases)
    for (DType to : c.to) {
      SCOPED_TRACE(c.what + " -> " + std::string(dtype_name(to)));
      const Tensor want = c.src.to(to), got = to_host(to_cuda(c.src).to(to));
      ASSERT_EQ(got.nbytes(), want.nbytes());
      EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0);
    }
}

// Tensor::fill / zeros on the device (the backend's fill hook: a memset for zero bits in one
// block, a kernel otherwise) against the same fill on the host, bit for bit, for every element
// size, contiguous and strided.
TEST(CudaMemory, DeviceFillMatchesHostFill) {
  FLUXRT_REQUIRE_GPU();
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::F64, DType::I64, DType::I32, DType::U8, DType::Bool}) {
    for (double value : {0.0, -0.0, 1.5, -3.25, 100.0}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " " + std::to_string(value));
      Tensor dev = Tensor::empty({3, 70}, d, Device::cuda(0));
      dev.fill(7.0);
      Tensor view = dev.slice(1, 1, 70, 3);  // strided, unaligned
      view.fill(value);
      Tensor host = Tensor::full({3, 70}, d, 7.0);
      host.slice(1, 1, 70, 3).fill(value);
      const Tensor got = to_host(dev);
      EXPECT_EQ(0, std::memcmp(got.raw_data(), host.raw_data(), host.nbytes()));
    }
    const Tensor z = to_host(Tensor::zeros({1000}, d, Device::cuda(0))), want = Tensor::zeros({1000}, d);
    EXPECT_EQ(0, std::memcmp(z.raw_data(), want.raw_data(), want.nbytes()));
  }
}

// Staged uploads from several threads at once (components loading in parallel): each takes its
// own staging buffers, all queue on the device's stream; every upload arrives intact.
TEST(CudaMemory, ConcurrentStagedUploadsArriveIntact) {
  FLUXRT_REQUIRE_GPU();
  std::vector<Tensor> host, dev(3);
  for (int i = 0; i < 3; ++i) host.push_back(random_normal({9, 1000003}, DType::F32, 60 + i));  // > 32 MiB
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) threads.emplace_back([&, i] { dev[i] = to_cuda(host[i]); });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 3; ++i) {
    const Tensor back = to_host(dev[i]);
    EXPECT_EQ(0, std::memcmp(back.raw_data(), host[i].raw_data(), host[i].nbytes())) << "upload " << i;
  }
}

TEST(CudaMemory, OutOfMemoryNamesTheSize) {
  FLUXRT_REQUIRE_GPU();
  try {
    (void)Tensor::empty({int64_t{1} << 45}, DType::F32, Device::cuda(0));  // 128 TiB
    FAIL() << "expected OutOfMemory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory);
    EXPECT_NE(std::string(e.what()).find("asked"), std::string::npos) << e.what();
  }
  // The device is still usable afterwards.
  EXPECT_TRUE(all_close(to_host(to_cuda(Tensor::full({4}, DType::F32, 2.0))), Tensor::full({4}, DType::F32, 2.0),
                        TolClass::Exact));
}

TEST(CudaMemory, HostTensorGivenToCudaKernelIsAnError) {
  FLUXRT_REQUIRE_GPU();
  const Tensor h = random_normal({4, 8}, DType::F32, 47);
  ops::ScopedKernelTable scope(backend::kernels_for(Device::cuda(0)));
  EXPECT_THROW(ops::silu(h), Error);
}

}  // namespace
}  // namespace fluxrt::test
