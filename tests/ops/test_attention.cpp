// Attention: the CPU kernels (SIMD and oneDNN) against the f64 oracle (f32: NMSE <= 1e-7; bf16/f16: at most
// 2x the error of a naive same-dtype implementation), on random, large-norm and adversarial inputs that make
// the Cauchy-Schwarz bound loose (and must hit the exact fallback), every mask/bias/GQA/RoPE variant, strided
// views of a fused qkv tensor, plus the ops front end and its validation. The L = 4608 cases live in
// test_attention_slow.cpp.
#include <hwy/targets.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "backend/cpu/onednn_util.h"
#include "backend/kernel_table.h"
#include "core/error.h"
#include "ops/attention.h"
#include "ops/dispatch.h"
#include "test_attention_common.h"

namespace fluxrt::test_attention {
namespace {

class AttentionCase : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionCase, MatchesReference) { check_case(GetParam()); }

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
      // Plain shapes: blocks and tiles with tails, head dims that need padding, B = 2, Lq != Lk.
      mk(F32, 1, 64, 64, 2, 2, 64, Inputs::Random, Rope::None, Expect::FixedOnly),
      mk(F32, 2, 100, 100, 3, 3, 80),
      mk(F32, 1, 37, 150, 4, 4, 64),
      mk(F32, 2, 130, 29, 2, 2, 32),
      mk(F32, 1, 1, 1, 1, 1, 8),
      // Grouped-query heads (Qwen3: 4 query heads per kv head).
      mk(F32, 2, 77, 77, 8, 2, 128, Inputs::Random, Rope::HalfSplit),
      mk(F32, 1, 50, 90, 6, 1, 64),
      // RoPE layouts: FLUX.1 3-axis, FLUX.2 4-axis (adjacent pairs), Qwen rotate-half.
      mk(F32, 1, 200, 200, 2, 2, 128, Inputs::Random, Rope::Flux1, Expect::FixedOnly),
      mk(F32, 2, 200, 200, 2, 2, 128, Inputs::Random, Rope::Flux2),
      mk(F32, 1, 40, 130, 4, 4, 128, Inputs::Random, Rope::HalfSplit),
      fused(mk(F32, 2, 150, 150, 3, 3, 128, Inputs::Random, Rope::Flux2)),
      fused(mk(F32, 1, 97, 97, 2, 2, 64)),
      // Masks: causal (Lq == Lk, Lq < Lk, Lq > Lk where early rows see nothing), key padding
      // (B = 5: the last batch element is fully masked), both (Qwen3 text encoder).
      causal(mk(F32, 1, 100, 100, 2, 2, 64)),
      causal(mk(F32, 1, 40, 100, 2, 2, 64)),
      causal(mk(F32, 1, 100, 40, 2, 2, 64)),
      padded(mk(F32, 5, 70, 70, 2, 2, 64)),
      causal(padded(mk(F32, 2, 77, 77, 8, 2, 128, Inputs::Random, Rope::HalfSplit))),
      // Additive bias (T5: scale 1, relative-position bias).
      biased(mk(F32, 2, 90, 90, 3, 3, 64)),
      biased(causal(padded(mk(F32, 5, 60, 80, 2, 1, 64)))),
      // Norms: large scores, near one-hot rows, and keys that make the bound useless.
      mk(F32, 1, 192, 192, 2, 2, 64, Inputs::LargeNorm),
      mk(F32, 1, 192, 192, 2, 2, 128, Inputs::SelfSimilar, Rope::Flux2),
      mk(F32, 1, 96, 160, 2, 2, 64, Inputs::FarKey, Rope::None, Expect::AllFallback),
      mk(F32, 1, 96, 96, 2, 2, 128, Inputs::FarKey, Rope::HalfSplit, Expect::AllFallback),
      mk(F32, 1, 200, 288, 2, 2, 128, Inputs::MixedNorm, Rope::Flux1, Expect::SomeFallback),
      mk(F32, 1, 192, 192, 2, 2, 128, Inputs::NearThreshold),
      causal(mk(F32, 1, 192, 192, 2, 2, 64, Inputs::FarKey, Rope::None, Expect::AllFallback)),
      padded(mk(F32, 5, 96, 96, 2, 2, 64, Inputs::MixedNorm)),
      // bf16 / f16 against the naive same-dtype yardstick.
      mk(BF16, 1, 256, 256, 2, 2, 128, Inputs::Random, Rope::Flux2, Expect::FixedOnly),
      mk(BF16, 2, 100, 61, 4, 2, 64),
      mk(BF16, 1, 192, 192, 2, 2, 64, Inputs::LargeNorm),
      mk(BF16, 1, 192, 192, 2, 2, 128, Inputs::SelfSimilar, Rope::Flux1),
      mk(BF16, 1, 96, 96, 2, 2, 128, Inputs::FarKey, Rope::Flux2, Expect::AllFallback),
      mk(BF16, 1, 288, 288, 2, 2, 128, Inputs::MixedNorm, Rope::Flux2, Expect::SomeFallback),
      mk(BF16, 1, 192, 192, 2, 2, 128, Inputs::NearThreshold, Rope::Flux2),
      causal(padded(mk(BF16, 2, 77, 77, 8, 2, 128, Inputs::Random, Rope::HalfSplit))),
      biased(mk(BF16, 1, 90, 90, 4, 4, 64)),
      causal(mk(BF16, 1, 77, 77, 2, 2, 64)),
      fused(mk(BF16, 1, 160, 160, 2, 2, 128, Inputs::Random, Rope::Flux2)),
      mk(F16, 1, 130, 130, 2, 2, 64, Inputs::Random, Rope::HalfSplit),
      // One modest long sequence (L = 4608 is in the slow suite).
      mk(BF16, 1, 1536, 1536, 2, 2, 128, Inputs::Random, Rope::Flux2, Expect::FixedOnly),
  };
}

INSTANTIATE_TEST_SUITE_P(Cpu, AttentionCase, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// The oneDNN implementation on every case it supports (no causal mask, no bias), plus key counts
// that span several 1024-key chunks with a narrower last one, padding and grouped heads across
// chunks, and fallback rows in a late chunk.
std::vector<Case> onednn_cases() {
  std::vector<Case> out;
  for (const Case& c : cases())
    if (!c.causal && !c.bias) out.push_back(c);
  out.push_back(mk(F32, 1, 100, 2100, 2, 2, 64, Inputs::Random, Rope::None, Expect::FixedOnly));
  out.push_back(mk(BF16, 1, 130, 2048, 4, 2, 128, Inputs::Random, Rope::None, Expect::FixedOnly));
  out.push_back(padded(mk(BF16, 5, 70, 1500, 4, 1, 128)));
  out.push_back(mk(F32, 1, 64, 1100, 2, 2, 128, Inputs::FarKey, Rope::None, Expect::AllFallback));
  out.push_back(mk(BF16, 1, 200, 1300, 2, 2, 128, Inputs::MixedNorm, Rope::Flux2, Expect::SomeFallback));
  return out;
}

class AttentionOneDnnCase : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionOneDnnCase, MatchesReference) {
  const Case& c = GetParam();
  ASSERT_EQ(backend::cpu::attention_impl_for(make_problem(c).args, onednn_options(c)),
            backend::cpu::AttentionCpuImpl::OneDnn);
  check_case(c, {{0, c.Lq}}, 1234, onednn_options(c));
  EXPECT_EQ(backend::onednn::reference_primitive_count(), 0) << "oneDNN fell back to a reference kernel";
}

INSTANTIATE_TEST_SUITE_P(Cpu, AttentionOneDnnCase, ::testing::ValuesIn(onednn_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

TEST(AttentionOneDnn, ExactEverywhereAgreesWithFixedMaximum) {
  const Case c = mk(BF16, 2, 150, 300, 4, 2, 128, Inputs::Random, Rope::Flux2);
  Problem p = make_problem(c);
  backend::cpu::AttentionCpuOptions o = onednn_options(c);
  backend::cpu::AttentionCpuStats fixed_stats, exact_stats;
  backend::cpu::attention(p.args, o, &fixed_stats);
  const Tensor fixed = p.args.out.clone();
  o.force_online = true;
  backend::cpu::attention(p.args, o, &exact_stats);
  EXPECT_EQ(fixed_stats.fixed_blocks, fixed_stats.blocks);
  EXPECT_EQ(exact_stats.online_blocks, exact_stats.blocks);
  EXPECT_EQ(exact_stats.blocks, 2 * 4 * 3);  // batch x heads x 64-row blocks
  const Tensor ref = oracle(p.args, 0, 150);
  const Tensor naive = naive_same_dtype(p.args, 0, 150);
  EXPECT_TRUE(test::attention_close(fixed, naive, ref));
  EXPECT_TRUE(test::attention_close(p.args.out, naive, ref));
}

// Repeated calls (the steps of a denoising loop) reuse the cached primitives and buffers and give
// bit-identical results, also after a call of other shapes in between.
TEST(AttentionOneDnn, RepeatedCallsAreBitIdentical) {
  const Case big = mk(BF16, 1, 200, 1100, 3, 3, 128, Inputs::Random, Rope::Flux2);
  const Case small = mk(F32, 2, 50, 70, 2, 1, 64);
  Problem pb = make_problem(big), ps = make_problem(small);
  backend::cpu::attention(pb.args, onednn_options(big), nullptr);
  const std::vector<float> first = pb.args.out.to_vector();
  for (int i = 0; i < 2; ++i) {
    backend::cpu::attention(ps.args, onednn_options(small), nullptr);
    backend::cpu::attention(pb.args, onednn_options(big), nullptr);
    ASSERT_EQ(pb.args.out.to_vector(), first);
  }
  EXPECT_LE(error_vs(ps.args.out, oracle(ps.args, 0, 50), 0, 50).nmse, 1e-7);
}

TEST(AttentionOneDnn, EmptyKeysGiveZeros) {
  Case c = mk(F32, 1, 10, 0, 2, 2, 16);
  Problem p = make_problem(c);
  p.args.out.fill(7.0);
  backend::cpu::attention(p.args, onednn_options(c), nullptr);
  for (float x : p.args.out.to_vector()) ASSERT_EQ(x, 0.0f);
}

// Auto: the matmul primitives for long bf16 sequences where oneDNN has native bf16, the SIMD
// kernel otherwise; causal masks and biases always on the SIMD kernel, even when OneDnn is asked.
TEST(AttentionOneDnn, AutoChoosesByCpuDtypeAndShape) {
  using backend::cpu::AttentionCpuImpl;
  const bool native = backend::onednn::native_bf16();
  const Problem long_bf16 = make_problem(mk(BF16, 1, 256, 512, 2, 2, 128, Inputs::Random, Rope::Flux2));
  const Problem long_f32 = make_problem(mk(F32, 1, 256, 512, 2, 2, 128));
  const Problem short_bf16 = make_problem(mk(BF16, 1, 64, 64, 2, 2, 128));
  const Problem causal_bf16 = make_problem(causal(mk(BF16, 1, 256, 512, 2, 2, 128)));
  const backend::cpu::AttentionCpuOptions autoo;
  backend::cpu::AttentionCpuOptions forced;
  forced.impl = AttentionCpuImpl::OneDnn;
  if (std::getenv("FLUXRT_ATTENTION_IMPL") == nullptr) {
    EXPECT_EQ(backend::cpu::attention_impl_for(long_bf16.args, autoo),
              native ? AttentionCpuImpl::OneDnn : AttentionCpuImpl::Simd);
    EXPECT_EQ(backend::cpu::attention_impl_for(long_f32.args, autoo), AttentionCpuImpl::Simd);
    EXPECT_EQ(backend::cpu::attention_impl_for(short_bf16.args, autoo), AttentionCpuImpl::Simd);
  }
  EXPECT_EQ(backend::cpu::attention_impl_for(causal_bf16.args, forced), AttentionCpuImpl::Simd);
  EXPECT_EQ(backend::cpu::attention_impl_for(short_bf16.args, forced), AttentionCpuImpl::OneDnn);
  const std::string d = backend::cpu::describe_attention(long_bf16.args, forced);
  EXPECT_EQ(d.rfind(native ? "onednn bf16 (" : "onednn f32 (", 0), 0u) << d;
  EXPECT_EQ(backend::cpu::describe_attention(causal_bf16.args, forced).rfind("simd ", 0), 0u);
}

// The dispatcher runs only the best target of this CPU; force each supported one in turn (the
// micro-kernel row count and the vector width differ between SSE4, AVX2, AVX-512 and scalar).
TEST(Attention, EverySupportedSimdTarget) {
  const std::vector<Case> subset = {
      mk(F32, 2, 100, 100, 3, 3, 80),
      causal(padded(mk(F32, 2, 77, 77, 8, 2, 128, Inputs::Random, Rope::HalfSplit))),
      biased(mk(F32, 1, 50, 70, 2, 2, 64)),
      mk(F32, 1, 96, 160, 2, 2, 64, Inputs::FarKey, Rope::None, Expect::AllFallback),
      mk(F32, 1, 200, 288, 2, 2, 128, Inputs::MixedNorm, Rope::Flux1, Expect::SomeFallback),
      mk(BF16, 1, 130, 130, 2, 2, 128, Inputs::Random, Rope::Flux2, Expect::FixedOnly),
  };
  // Targets the kernel was not compiled for (SSSE3) dispatch to the next one down: run each once.
  std::set<std::string> seen;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string name = backend::cpu::attention_target_name();
    if (!seen.insert(name).second) continue;
    SCOPED_TRACE("SIMD target " + name);
    for (const Case& c : subset) {
      SCOPED_TRACE(case_name(c));
      check_case(c);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  std::string names;
  for (const std::string& n : seen) names += n + " ";
  RecordProperty("simd_targets", names);
  std::printf("attention ran on SIMD targets: %s\n", names.c_str());
  EXPECT_GE(seen.size(), 2u);  // at least the best target and the scalar fallback
}

TEST(Attention, OnlinePathAgreesWithFixedPath) {
  Problem p = make_problem(mk(F32, 2, 150, 150, 4, 2, 128, Inputs::Random, Rope::Flux2));
  backend::cpu::AttentionCpuStats fixed_stats, online_stats;
  backend::cpu::attention(p.args, {}, &fixed_stats);
  const Tensor fixed = p.args.out.clone();
  backend::cpu::AttentionCpuOptions opt;
  opt.force_online = true;
  backend::cpu::attention(p.args, opt, &online_stats);
  EXPECT_EQ(fixed_stats.fixed_blocks, fixed_stats.blocks);
  EXPECT_EQ(online_stats.online_blocks, online_stats.blocks);
  const Tensor ref = oracle(p.args, 0, 150);
  const Err ef = error_vs(fixed, ref, 0, 150), eo = error_vs(p.args.out, ref, 0, 150);
  EXPECT_LE(ef.nmse, 1e-7);
  EXPECT_LE(eo.nmse, 1e-7);
}

TEST(Attention, EmptyKeysGiveZeros) {
  Case c = mk(F32, 1, 10, 0, 2, 2, 16);
  Problem p = make_problem(c);
  p.args.out.fill(7.0);
  backend::cpu::attention(p.args);
  for (float x : p.args.out.to_vector()) ASSERT_EQ(x, 0.0f);
}

// The scratch is per thread and grows to the largest call: repeating a call (the steps of a
// denoising loop) or making a smaller one allocates nothing, and reused buffers (holding the
// previous call's data) give bit-identical results.
TEST(Attention, SteadyStateCallsReuseTheScratch) {
  Problem big = make_problem(mk(BF16, 1, 200, 200, 3, 3, 128, Inputs::Random, Rope::Flux2));
  Problem small = make_problem(mk(F32, 2, 50, 70, 2, 1, 64));
  backend::cpu::attention(big.args);
  const std::vector<float> first = big.args.out.to_vector();
  const int64_t before = backend::cpu::attention_scratch_allocations();
  for (int i = 0; i < 3; ++i) {
    backend::cpu::attention(big.args);
    ASSERT_EQ(big.args.out.to_vector(), first);
    backend::cpu::attention(small.args);
  }
  EXPECT_EQ(backend::cpu::attention_scratch_allocations(), before);
  const Err e = error_vs(small.args.out, oracle(small.args, 0, 50), 0, 50);
  EXPECT_LE(e.nmse, 1e-7);
}

TEST(Attention, OpsFrontEndUsesKernelTables) {
  Problem p = make_problem(mk(BF16, 1, 64, 64, 2, 2, 128, Inputs::Random, Rope::Flux2));
  ops::AttentionOptions o;
  o.rope = p.args.rope;
  o.rope_table = {p.args.rope_cos, p.args.rope_sin};
  const Tensor got = ops::attention(p.args.q, p.args.k, p.args.v, o);
  backend::cpu::attention(p.args);
  const std::vector<float> a = got.to_vector(), b = p.args.out.to_vector();
  ASSERT_EQ(a, b);  // default scale 1/sqrt(D), same kernel: bit-identical
  ASSERT_NE(backend::cpu_kernels().attention, nullptr);
  ASSERT_NE(backend::ref_kernels().attention, nullptr);
  ops::ScopedKernelTable force_ref(backend::ref_kernels());
  const Tensor viaref = ops::attention(p.args.q, p.args.k, p.args.v, o);
  const Err e = error_vs(viaref, oracle(p.args, 0, 64), 0, 64);
  EXPECT_LE(e.maxabs, 0.01);  // the oracle rounded once to bf16
}

TEST(Attention, OpsFrontEndConvertsMaskAndBias) {
  Case c = causal(padded(biased(mk(F32, 5, 33, 33, 2, 2, 32))));
  Problem p = make_problem(c);
  ops::AttentionOptions o;
  o.scale = p.args.scale;
  o.causal = true;
  o.key_padding_mask = p.args.key_padding_mask.to(DType::I64);
  o.bias = p.args.bias.select(0, 0).to(DType::BF16);  // [H, Lq, Lk], broadcast from the left
  const Tensor got = ops::attention(p.args.q, p.args.k, p.args.v, o);
  AttentionArgs r = p.args;
  r.bias = p.args.bias.to(DType::BF16).to(DType::F32);
  const Err e = error_vs(got, oracle(r, 0, 33), 0, 33);
  EXPECT_LE(e.nmse, 1e-7);
}

void expect_invalid(const AttentionArgs& a, const char* what) {
  try {
    ops::attention_into(a);
    ADD_FAILURE() << "accepted: " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("[attention]"), std::string::npos) << e.what();
  }
}

TEST(Attention, ValidationRejectsBadArguments) {
  Problem p = make_problem(mk(F32, 2, 16, 16, 4, 2, 64, Inputs::Random, Rope::HalfSplit));
  {
    AttentionArgs a = p.args;
    a.q = Tensor::zeros({2, 16, 4, 128}, DType::F32).slice(3, 0, 128, 2);  // stride 2 in the last dim
    expect_invalid(a, "strided head dim");
  }
  {
    AttentionArgs a = p.args;
    a.k = Tensor::zeros({2, 16, 3, 64}, DType::F32);
    a.v = a.k;
    expect_invalid(a, "4 heads over 3 kv heads");
  }
  {
    AttentionArgs a = p.args;
    a.v = Tensor::zeros({2, 16, 2, 64}, DType::BF16);
    expect_invalid(a, "mixed dtypes");
  }
  {
    AttentionArgs a = p.args;
    a.rope_cos = a.rope_cos.slice(0, 0, 8);
    a.rope_sin = a.rope_sin.slice(0, 0, 8);
    expect_invalid(a, "short RoPE table");
  }
  {
    AttentionArgs a = p.args;
    a.bias = Tensor::zeros({1, 3, 16, 16}, DType::F32);
    expect_invalid(a, "bias with 3 heads");
  }
  {
    AttentionArgs a = p.args;
    a.key_padding_mask = Tensor::zeros({2, 15}, DType::U8);
    expect_invalid(a, "short padding mask");
  }
  {
    AttentionArgs a = p.args;
    a.out = Tensor::zeros({2, 16, 4, 32}, DType::F32);
    expect_invalid(a, "wrong output shape");
  }
}

}  // namespace
}  // namespace fluxrt::test_attention
