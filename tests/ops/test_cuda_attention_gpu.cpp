// The CUDA attention kernel against the f64 oracle with the rules of docs/numerics.md (f32: NMSE
// <= 1e-7; bf16/f16: at most 2x the error of a naive same-dtype implementation) on the inputs of
// the CPU attention tests (random, large norms, adversarial keys that make the Cauchy-Schwarz bound
// loose and must take the exact fallback), every variant (GQA, causal, padding, bias, RoPE layouts,
// strided q/k/v slices of a fused qkv), and L = 4608 FLUX.2 shapes. The FLUX shapes (head dim 128,
// bf16/f16, no GQA/mask/bias/causal) run the tensor-core kernel (attention_tc.cu); the CudaAttentionTc
// suite checks that they did and covers its tiles' edges, and FLUXRT_CUDA_ATTENTION=simple sends
// them back to the CUDA-core kernel. Skips without a GPU.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "cuda_test_util.h"
#include "test_attention_common.h"

namespace fluxrt::test_attention {
namespace {

using test::to_cuda;
using test::to_host;

// The problem's args with every tensor mirrored on device 0 (q/k/v of a fused qkv stay views).
AttentionArgs on_device(const Problem& p) {
  AttentionArgs d = p.args;
  if (p.qkv.defined()) {
    const Tensor qkv = to_cuda(p.qkv);
    d.q = qkv.select(2, 0);
    d.k = qkv.select(2, 1);
    d.v = qkv.select(2, 2);
  } else {
    d.q = to_cuda(p.args.q);
    d.k = to_cuda(p.args.k);
    d.v = to_cuda(p.args.v);
  }
  d.out = Tensor::empty(p.args.out.shape(), p.args.out.dtype(), Device::cuda(0));
  d.rope_cos = to_cuda(p.args.rope_cos);
  d.rope_sin = to_cuda(p.args.rope_sin);
  d.rope_q_cos = to_cuda(p.args.rope_q_cos);
  d.rope_q_sin = to_cuda(p.args.rope_q_sin);
  d.key_padding_mask = to_cuda(p.args.key_padding_mask);
  d.bias = to_cuda(p.args.bias);
  return d;
}

// Sets FLUXRT_CUDA_ATTENTION for one scope (the host side reads it on every call).
class ImplEnv {
 public:
  explicit ImplEnv(const char* value) {
    if (const char* v = std::getenv("FLUXRT_CUDA_ATTENTION")) old_ = v;
    ::setenv("FLUXRT_CUDA_ATTENTION", value, 1);
  }
  ~ImplEnv() {
    if (old_) ::setenv("FLUXRT_CUDA_ATTENTION", old_->c_str(), 1);
    else ::unsetenv("FLUXRT_CUDA_ATTENTION");
  }
  ImplEnv(const ImplEnv&) = delete;
  ImplEnv& operator=(const ImplEnv&) = delete;

 private:
  std::optional<std::string> old_;
};

// Whether the host side sends this case to the tensor-core kernel (mirrors cuda_attention.cpp).
bool tensor_core_case(const Case& c) {
  return (c.dtype == DType::BF16 || c.dtype == DType::F16) && c.D == 128 && c.H == c.Hkv && !c.causal && !c.padding &&
         !c.bias && c.Lk >= 1;
}

// Whether the host side sends this case to the GEMM-composed path (mirrors cuda_attention.cpp).
bool composed_case(const Case& c) {
  return (c.dtype == DType::BF16 || c.dtype == DType::F16) && c.D > 256 && c.rope == Rope::None && c.H == c.Hkv &&
         !c.causal && !c.padding && !c.bias && c.Lk >= 1;
}

cuda::AttentionStats check_cuda(const Case& c, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                bool force_online = false) {
  SCOPED_TRACE(case_name(c));
  Problem p = make_problem(c);
  ops::validate_attention(p.args);
  const AttentionArgs d = on_device(p);
  cuda::AttentionStats stats;
  cuda::attention(d, force_online, &stats);
  const char* impl = std::getenv("FLUXRT_CUDA_ATTENTION");
  const bool tc_expected = tensor_core_case(c) && !(impl && std::string(impl) == "simple");
  EXPECT_EQ(stats.tensor_core_rows, tc_expected ? stats.rows : 0);
  const bool composed_expected = composed_case(c) && !(impl && std::string(impl) == "simple");
  EXPECT_EQ(stats.gemm_rows, composed_expected ? stats.rows : 0);
  const Tensor out = to_host(d.out);
  for (auto [r0, r1] : ranges) {
    SCOPED_TRACE("query rows " + std::to_string(r0) + ".." + std::to_string(r1));
    const Tensor ref = oracle(p.args, r0, r1).slice(1, r0, r1);
    const Tensor got = out.slice(1, r0, r1);
    if (c.dtype == DType::F32) {
      EXPECT_TRUE(test::all_close(got, ref, test::TolClass::Attention));
    } else {
      const Tensor naive = naive_same_dtype(p.args, r0, r1).slice(1, r0, r1);
      EXPECT_TRUE(test::attention_close(got, naive, ref));
    }
  }
  if (!force_online) switch (c.expect) {
      case Expect::Any: break;
      case Expect::FixedOnly: EXPECT_EQ(stats.fallback_rows, 0); break;
      case Expect::AllFallback: EXPECT_EQ(stats.fallback_rows, stats.rows); break;
      case Expect::SomeFallback:
        EXPECT_GT(stats.fallback_rows, 0);
        EXPECT_LT(stats.fallback_rows, stats.rows);
        break;
      case Expect::OnlineOnly: EXPECT_EQ(stats.online_rows, stats.rows); break;
    }
  return stats;
}

Case mk(DType dt, int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t Hkv, int64_t D, Inputs in = Inputs::Random,
        Rope rope = Rope::None, Expect ex = Expect::Any) {
  Case c;
  c.dtype = dt;
  c.B = B;
  c.Lq = Lq;
  c.Lk = Lk;
  c.H = H;
  c.Hkv = Hkv;
  c.D = D;
  c.inputs = in;
  c.rope = rope;
  c.expect = ex;
  return c;
}
Case causal(Case c) { c.causal = true; return c; }
Case padded(Case c) { c.padding = true; return c; }
Case biased(Case c) { c.bias = true; c.expect = Expect::OnlineOnly; return c; }
Case fused(Case c) { c.fused = true; return c; }

constexpr DType F32 = DType::F32;
constexpr DType BF16 = DType::BF16;
constexpr DType F16 = DType::F16;

std::vector<Case> cases() {
  return {
      mk(F32, 1, 64, 64, 2, 2, 64, Inputs::Random, Rope::None, Expect::FixedOnly),
      mk(F32, 2, 100, 100, 3, 3, 80),
      mk(F32, 1, 37, 150, 4, 4, 64),
      mk(F32, 2, 130, 29, 2, 2, 32),
      mk(F32, 1, 1, 1, 1, 1, 8),
      mk(F32, 2, 77, 77, 8, 2, 128, Inputs::Random, Rope::HalfSplit),
      mk(F32, 1, 50, 90, 6, 1, 64),
      mk(F32, 1, 20, 40, 2, 2, 256),
      mk(F32, 1, 200, 200, 2, 2, 128, Inputs::Random, Rope::Flux1, Expect::FixedOnly),
      mk(F32, 2, 200, 200, 2, 2, 128, Inputs::Random, Rope::Flux2),
      mk(F32, 1, 40, 130, 4, 4, 128, Inputs::Random, Rope::HalfSplit),
      fused(mk(F32, 2, 150, 150, 3, 3, 128, Inputs::Random, Rope::Flux2)),
      causal(mk(F32, 1, 100, 100, 2, 2, 64)),
      causal(mk(F32, 1, 40, 100, 2, 2, 64)),
      causal(mk(F32, 1, 100, 40, 2, 2, 64)),
      padded(mk(F32, 5, 70, 70, 2, 2, 64)),
      causal(padded(mk(F32, 2, 77, 77, 8, 2, 128, Inputs::Random, Rope::HalfSplit))),
      biased(mk(F32, 2, 90, 90, 3, 3, 64)),
      biased(causal(padded(mk(F32, 5, 60, 80, 2, 1, 64)))),
      mk(F32, 1, 192, 192, 2, 2, 64, Inputs::LargeNorm),
      mk(F32, 1, 192, 192, 2, 2, 128, Inputs::SelfSimilar, Rope::Flux2),
      mk(F32, 1, 96, 160, 2, 2, 64, Inputs::FarKey, Rope::None, Expect::AllFallback),
      mk(F32, 1, 200, 288, 2, 2, 128, Inputs::MixedNorm, Rope::Flux1, Expect::SomeFallback),
      mk(F32, 1, 192, 192, 2, 2, 128, Inputs::NearThreshold),
      causal(mk(F32, 1, 192, 192, 2, 2, 64, Inputs::FarKey, Rope::None, Expect::AllFallback)),
      padded(mk(F32, 5, 96, 96, 2, 2, 64, Inputs::MixedNorm)),
      mk(BF16, 1, 256, 256, 2, 2, 128, Inputs::Random, Rope::Flux2, Expect::FixedOnly),
      mk(BF16, 2, 100, 61, 4, 2, 64),
      mk(BF16, 1, 192, 192, 2, 2, 64, Inputs::LargeNorm),
      mk(BF16, 1, 192, 192, 2, 2, 128, Inputs::SelfSimilar, Rope::Flux1),
      mk(BF16, 1, 96, 96, 2, 2, 128, Inputs::FarKey, Rope::Flux2, Expect::AllFallback),
      mk(BF16, 1, 288, 288, 2, 2, 128, Inputs::MixedNorm, Rope::Flux2, Expect::SomeFallback),
      causal(padded(mk(BF16, 2, 77, 77, 8, 2, 128, Inputs::Random, Rope::HalfSplit))),
      biased(mk(BF16, 1, 90, 90, 4, 4, 64)),
      fused(mk(BF16, 1, 160, 160, 2, 2, 128, Inputs::Random, Rope::Flux2)),
      mk(F16, 1, 130, 130, 2, 2, 64, Inputs::Random, Rope::HalfSplit),
      // The VAE mid block: one 512-wide head over q/k/v slices of its qkv projection (16 values per lane).
      mk(F32, 1, 50, 70, 1, 1, 512),
      mk(BF16, 1, 300, 300, 1, 1, 512),
      fused(mk(BF16, 2, 130, 130, 1, 1, 512)),
      mk(BF16, 1, 40, 60, 2, 2, 320),
  };
}

class CudaAttention : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttention, MatchesReference) {
  FLUXRT_REQUIRE_GPU();
  check_cuda(GetParam(), {{0, GetParam().Lq}});
}

TEST_P(CudaAttention, OnlinePathMatchesReference) {
  FLUXRT_REQUIRE_GPU();
  check_cuda(GetParam(), {{0, GetParam().Lq}}, /*force_online=*/true);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaAttention, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// ---- tensor-core kernel (attention_tc.cu): 64-row query tiles, 64-key tiles ----
std::vector<Case> tc_cases() {
  return {
      mk(BF16, 1, 64, 64, 1, 1, 128, Inputs::Random, Rope::None, Expect::FixedOnly),
      mk(BF16, 1, 1, 1, 1, 1, 128),
      mk(BF16, 1, 1, 200, 2, 2, 128, Inputs::Random, Rope::Flux2),
      mk(BF16, 1, 100, 100, 3, 3, 128, Inputs::Random, Rope::Flux2, Expect::FixedOnly),  // both tails partial
      mk(BF16, 2, 130, 130, 2, 2, 128, Inputs::Random, Rope::Flux1),
      mk(BF16, 1, 63, 65, 2, 2, 128, Inputs::Random, Rope::Flux2),  // a partial query tile and a 1-key tile
      mk(BF16, 1, 77, 150, 2, 2, 128, Inputs::Random, Rope::Flux2),  // queries use key-table rows offset by 73
      mk(BF16, 1, 150, 40, 2, 2, 128),  // more queries than keys (no RoPE: query rows would precede the table)
      mk(BF16, 1, 128, 128, 2, 2, 128, Inputs::Random, Rope::HalfSplit),
      mk(BF16, 2, 256, 256, 24, 24, 128, Inputs::Random, Rope::Flux2, Expect::FixedOnly),  // batch 2 x 24 heads
      mk(BF16, 1, 192, 192, 2, 2, 128, Inputs::LargeNorm, Rope::Flux2),
      mk(BF16, 1, 200, 200, 2, 2, 128, Inputs::SelfSimilar, Rope::Flux2),
      mk(BF16, 1, 130, 130, 2, 2, 128, Inputs::FarKey, Rope::Flux1, Expect::AllFallback),
      mk(BF16, 1, 300, 300, 2, 2, 128, Inputs::MixedNorm, Rope::Flux2, Expect::SomeFallback),
      mk(BF16, 1, 192, 192, 2, 2, 128, Inputs::NearThreshold, Rope::Flux2),
      fused(mk(BF16, 2, 100, 100, 3, 3, 128, Inputs::Random, Rope::Flux2)),
      fused(mk(BF16, 1, 130, 130, 2, 2, 128, Inputs::MixedNorm, Rope::Flux2)),
      mk(F16, 1, 100, 100, 2, 2, 128, Inputs::Random, Rope::Flux2, Expect::OnlineOnly),
      mk(F16, 1, 192, 192, 2, 2, 128, Inputs::SelfSimilar, Rope::Flux1, Expect::OnlineOnly),
      fused(mk(F16, 1, 70, 70, 2, 2, 128, Inputs::Random, Rope::HalfSplit)),
  };
}

class CudaAttentionTc : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttentionTc, MatchesReference) {
  FLUXRT_REQUIRE_GPU();
  ImplEnv env("tc");
  check_cuda(GetParam(), {{0, GetParam().Lq}});
}

TEST_P(CudaAttentionTc, OnlinePathMatchesReference) {
  FLUXRT_REQUIRE_GPU();
  ImplEnv env("tc");
  check_cuda(GetParam(), {{0, GetParam().Lq}}, /*force_online=*/true);
}

// The bypass switch: the same case on the CUDA-core kernel.
TEST_P(CudaAttentionTc, SimpleSwitchMatchesReference) {
  FLUXRT_REQUIRE_GPU();
  ImplEnv env("simple");
  Case c = GetParam();
  c.expect = Expect::Any;  // the fixed/online split is the tensor-core kernel's
  check_cuda(c, {{0, c.Lq}});
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaAttentionTc, ::testing::ValuesIn(tc_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// Runs without a GPU: every case is one the ops layer accepts, so a GPU run fails only for the
// kernel (an invalid case hid behind the GPU skip once: more queries than keys with RoPE).
TEST(CudaAttentionCases, AreValidArguments) {
  std::vector<Case> all = cases();
  for (const Case& c : tc_cases()) all.push_back(c);
  for (const Case& c : all) {
    SCOPED_TRACE(case_name(c));
    EXPECT_NO_THROW(ops::validate_attention(make_problem(c).args));
  }
}

TEST(CudaAttentionTcSwitch, RejectsUnknownValue) {
  FLUXRT_REQUIRE_GPU();
  ImplEnv env("fast");
  Problem p = make_problem(mk(BF16, 1, 64, 64, 1, 1, 128));
  const AttentionArgs d = on_device(p);
  EXPECT_THROW(cuda::attention(d, false, nullptr), Error);
}

// Seconds per attention call on device 0, after one warm-up call (for the throughput prints).
double seconds_per_call(const AttentionArgs& d, int reps) {
  cuda::attention(d, false, nullptr);
  cuda::synchronize(0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) cuda::attention(d, false, nullptr);
  cuda::synchronize(0);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

// The VAE mid block's attention on the CUDA-core kernel too (the switch that bypasses the GEMMs).
TEST(CudaAttentionComposed, SimpleSwitchMatchesReference) {
  FLUXRT_REQUIRE_GPU();
  ImplEnv env("simple");
  check_cuda(mk(BF16, 1, 300, 300, 1, 1, 512), {{0, 300}});
}

// The VAE mid block at 512^2 (64x64 latent pixels, one 512-wide head) on the composed path, and its
// throughput at 1024^2 (L = 16384) against the CUDA-core kernel; prints TFLOP/s, never asserts speed.
TEST(CudaAttentionComposed, VaeMidBlockL4096) {
  FLUXRT_REQUIRE_GPU();
  Case c = mk(BF16, 1, 4096, 4096, 1, 1, 512);
  c.fused = true;
  check_cuda(c, {{0, 40}, {2028, 2068}, {4056, 4096}});
}

TEST(CudaAttentionComposed, ThroughputVaeL16384) {
  FLUXRT_REQUIRE_GPU();
  Problem p = make_problem(mk(BF16, 1, 16384, 16384, 1, 1, 512));
  const AttentionArgs d = on_device(p);
  const double flops = 4.0 * 16384.0 * 16384.0 * 512;
  auto timed = [&](const char* impl, int reps) {
    ImplEnv env(impl);
    return seconds_per_call(d, reps);
  };
  const double s = timed("tc", 10);
  std::printf("FIGURE vae_attention_L16384_ms %.3f\nFIGURE vae_attention_L16384_tflops %.2f\n", s * 1e3,
              flops / s / 1e12);
  const double simple = timed("simple", 1);
  std::printf("FIGURE vae_attention_L16384_simple_ms %.3f\n", simple * 1e3);
}

// FLUX.2-klein at 1024^2: L = 4096 image + 512 text tokens, all 24 heads of a klein-4B layer in
// one launch; rows at the start, middle and end against the oracle.
Case long_case(DType dt, int64_t H, Inputs in, Rope rope) {
  Case c = mk(dt, 1, 4608, 4608, H, H, 128, in, rope);
  return c;
}
void check_long(const Case& c) { check_cuda(c, {{0, 40}, {c.Lq / 2 - 20, c.Lq / 2 + 20}, {c.Lq - 40, c.Lq}}); }

TEST(CudaAttentionLong, Bf16Flux2L4608AllHeads) {
  FLUXRT_REQUIRE_GPU();
  check_long(long_case(BF16, 24, Inputs::Random, Rope::Flux2));
}
TEST(CudaAttentionLong, Bf16Flux2L4608Batch2x24Heads) {
  FLUXRT_REQUIRE_GPU();
  Case c = long_case(BF16, 24, Inputs::Random, Rope::Flux2);
  c.B = 2;
  check_long(c);
}
TEST(CudaAttentionLong, F16Flux2L4608AllHeads) {
  FLUXRT_REQUIRE_GPU();
  check_long(long_case(F16, 24, Inputs::Random, Rope::Flux2));
}
TEST(CudaAttentionLong, F32Flux1L4608) {
  FLUXRT_REQUIRE_GPU();
  check_long(long_case(F32, 2, Inputs::Random, Rope::Flux1));
}
TEST(CudaAttentionLong, Bf16MixedNormL4608) {
  FLUXRT_REQUIRE_GPU();
  check_long(long_case(BF16, 4, Inputs::MixedNorm, Rope::Flux2));
}
TEST(CudaAttentionLong, F32SelfSimilarL4608) {
  FLUXRT_REQUIRE_GPU();
  check_long(long_case(F32, 2, Inputs::SelfSimilar, Rope::Flux2));
}


// Throughput of one klein-4B attention layer at 1024^2 (B = 1, L = 4096 + 512, H = 24, D = 128) on
// the default (tensor-core) path and on the CUDA-core kernel; prints TFLOP/s, never asserts speed.
TEST(CudaAttentionLong, ThroughputL4608) {
  FLUXRT_REQUIRE_GPU();
  Problem p = make_problem(long_case(BF16, 24, Inputs::Random, Rope::Flux2));
  const AttentionArgs d = on_device(p);
  const double flops = 4.0 * 24 * 4608.0 * 4608.0 * 128;  // QK^T and PV
  double s = 0;
  {
    ImplEnv env("tc");
    s = seconds_per_call(d, 20);
  }
  std::printf("FIGURE attention_L4608_ms %.3f\nFIGURE attention_L4608_tflops %.2f\n", s * 1e3, flops / s / 1e12);
  RecordProperty("tflops", std::to_string(flops / s / 1e12));
  {
    ImplEnv env("simple");
    s = seconds_per_call(d, 2);
  }
  std::printf("FIGURE attention_L4608_simple_ms %.3f\nFIGURE attention_L4608_simple_tflops %.2f\n", s * 1e3,
              flops / s / 1e12);
}

}  // namespace
}  // namespace fluxrt::test_attention
