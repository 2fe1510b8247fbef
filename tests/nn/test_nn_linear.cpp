// nn::Linear against the prepared-GEMM ops it wraps: bitwise the same as ops::linear* on the CPU
// backend (it adds nothing to the math), and within the GEMM tolerance of the ref backend.
#include <gtest/gtest.h>

#include "backend/kernel_table.h"
#include "core/error.h"
#include "nn/linear.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "support/compare.h"
#include "support/random_tensor.h"

namespace fluxrt::nn {
namespace {

using test::all_close;
using test::random_normal;
using test::TolClass;

// `fn` with every op (and every preparation) on the ref backend: the oracle.
template <typename Fn>
Tensor on_ref(Fn&& fn) {
  ops::ScopedKernelTable force(backend::ref_kernels());
  return fn();
}

TEST(NnLinear, ForwardMatchesOpsAndRef) {
  for (DType dt : {DType::F32, DType::BF16}) {
    for (Activation act : {Activation::None, Activation::GeluTanh, Activation::Silu}) {
      const Tensor w = random_normal({48, 32}, dt, 1, 0.0, 0.2);
      const Tensor b = random_normal({48}, dt, 2);
      const Tensor x = random_normal({2, 5, 32}, dt, 3);
      const Linear lin = Linear::prepare(w, b);
      EXPECT_EQ(lin.in_features(), 32);
      EXPECT_EQ(lin.out_features(), 48);
      const Tensor y = lin(x, act);  // [2, 5, 48]
      ASSERT_EQ(y.shape(), (Shape{2, 5, 48}));
      EXPECT_TRUE(all_close(y, ops::linear(x, *ops::prepare_linear(w, b), act), TolClass::Exact));
      const Tensor ref = on_ref([&] { return ops::linear(x, *ops::prepare_linear(w, b), act); });
      EXPECT_TRUE(all_close(y, ref, TolClass::Gemm)) << dtype_name(dt) << " act " << static_cast<int>(act);
    }
  }
}

TEST(NnLinear, ForwardIntoAndGatedResidualInto) {
  const Tensor w = random_normal({24, 16}, DType::F32, 4, 0.0, 0.2);
  const Tensor x = random_normal({7, 16}, DType::F32, 5);
  const Tensor gate = random_normal({24}, DType::F32, 6);
  const Tensor residual = random_normal({7, 24}, DType::F32, 7);
  const Linear lin = Linear::prepare(w);
  const Tensor y = Tensor::empty({7, 24}, DType::F32);
  lin.forward_into(x, y);
  EXPECT_TRUE(all_close(y, lin(x), TolClass::Exact));
  const Tensor g = Tensor::empty({7, 24}, DType::F32);
  lin.gated_residual_into(x, gate, residual, g);
  const Tensor ref =
      on_ref([&] { return ops::linear_gated_residual(x, *ops::prepare_linear(w), gate, residual); });
  EXPECT_TRUE(all_close(g, ref, TolClass::Gemm));
}

TEST(NnLinear, AddGatedResidualPerBatchRow) {
  // x [B, L, N] += gate [B, N] * lin(h): each batch element with its own gate row.
  const Tensor w = random_normal({32, 20}, DType::F32, 8, 0.0, 0.2);
  const Tensor h = random_normal({3, 6, 20}, DType::F32, 9);
  const Tensor gate = random_normal({3, 32}, DType::F32, 10);
  Tensor x = random_normal({3, 6, 32}, DType::F32, 11);
  const Tensor x0 = x.clone();
  Linear::prepare(w).add_gated_residual(h, gate, x);
  const Tensor ref = on_ref([&] {
    const auto p = ops::prepare_linear(w);
    Tensor expect = x0.clone();
    for (int64_t b = 0; b < 3; ++b) {
      Tensor eb = expect.select(0, b);
      ops::linear_gated_residual_into(h.select(0, b), *p, gate.select(0, b), eb, eb);
    }
    return expect;
  });
  EXPECT_TRUE(all_close(x, ref, TolClass::Gemm));
}

TEST(NnLinear, UnboundAndReleasedSource) {
  const Linear unbound = Linear::prepare(Tensor());
  EXPECT_FALSE(unbound.bound());
  EXPECT_EQ(unbound.parameter_bytes(), 0u);
  EXPECT_THROW((void)unbound(random_normal({2, 4}, DType::F32, 1)), Error);

  const Tensor w = random_normal({8, 4}, DType::BF16, 2);
  const Tensor b = random_normal({8}, DType::BF16, 3);
  Linear lin = Linear::prepare(w, b);
  EXPECT_EQ(lin.parameter_bytes(), w.nbytes() + b.nbytes());
  const Tensor x = random_normal({3, 4}, DType::BF16, 4);
  const Tensor before = lin(x);
  lin.release_source();
  EXPECT_EQ(lin.weight().shape(), w.shape());
  EXPECT_EQ(lin.weight().dtype(), w.dtype());
  EXPECT_EQ(lin.parameter_bytes(), w.nbytes() + b.nbytes());
  EXPECT_TRUE(all_close(lin(x), before, TolClass::Exact));  // the CPU backend packed its own copy
}

// Unmerged LoRA: every forward form with a low-rank branch against the same layer on the ref
// backend, and in f32 against the merged weight W + B A (the identity the branch stands for);
// detaching gives the plain layer back bit for bit.
TEST(NnLinear, LowRankBranchMatchesRefAndTheMergedWeight) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor w = random_normal({24, 16}, dt, 20, 0.0, 0.2);
    const Tensor bias = random_normal({24}, dt, 21);
    const Tensor a = random_normal({3, 16}, dt, 22, 0.0, 0.3);   // A [r, in]
    const Tensor bu = random_normal({24, 3}, dt, 23, 0.0, 0.3);  // B [out, r]
    const Tensor x = random_normal({2, 5, 16}, dt, 24);
    const Tensor gate = random_normal({24}, dt, 25);
    const Tensor residual = random_normal({5, 24}, dt, 26);
    const Tensor gates = random_normal({2, 24}, dt, 28);
    const Tensor acc0 = random_normal({2, 5, 24}, dt, 27);
    auto build = [&] {
      Linear l = Linear::prepare(w, bias);
      l.attach_low_rank(Linear::prepare(a), Linear::prepare(bu));
      return l;
    };
    // The forms a model uses, as one tensor each.
    auto forms = [&](const Linear& l) {
      std::vector<Tensor> out;
      for (Activation act : {Activation::None, Activation::GeluTanh, Activation::Silu}) {
        out.push_back(l(x, act));
        const Tensor y = Tensor::empty({2, 5, 24}, dt);
        l.forward_into(x, y, act);
        out.push_back(y);
      }
      const Tensor g = Tensor::empty({5, 24}, dt);
      l.gated_residual_into(x.select(0, 1), gate, residual, g, Activation::GeluTanh);
      out.push_back(g);
      Tensor acc = acc0.clone();
      l.add_gated_residual(x, gates, acc);
      out.push_back(acc);
      return out;
    };
    Linear plain = Linear::prepare(w, bias);
    const Tensor before = plain(x, Activation::GeluTanh);
    Linear lin = build();
    EXPECT_EQ(lin.low_rank_branches(), 1u);
    const std::vector<Tensor> got = forms(lin);
    const std::vector<Tensor> ref = [&] {
      ops::ScopedKernelTable force(backend::ref_kernels());
      return forms(build());
    }();
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(all_close(got[i], ref[i], TolClass::Gemm)) << dtype_name(dt) << " form " << i;
    if (dt == DType::F32) {
      // W + B A in f64 on the ref backend: the branch computes the merged layer.
      const std::vector<Tensor> merged = [&] {
        ops::ScopedKernelTable force(backend::ref_kernels());
        const auto at = ops::prepare_linear(a.transpose(0, 1).contiguous());
        return forms(Linear::prepare(ops::add(w, ops::linear(bu, *at)), bias));
      }();
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(all_close(got[i], merged[i], TolClass::Gemm)) << "form " << i << " vs the merged weight";
    }
    const Linear copy = lin;  // copies share the branches
    EXPECT_EQ(copy.low_rank_branches(), 1u);
    lin.detach_low_rank();
    EXPECT_EQ(copy.low_rank_branches(), 0u);
    EXPECT_TRUE(all_close(lin(x, Activation::GeluTanh), before, TolClass::Exact));
  }
}

// Branches on some batch elements (a batch of requests with different LoRAs): each element gives
// bit for bit what it gives alone with its own branches, and an element no branch covers what the
// plain layer gives, fused forms included.
TEST(NnLinear, LowRankBranchesOnRowsGiveEachRowItsOwn) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor w = random_normal({24, 16}, dt, 40, 0.0, 0.2);
    const Tensor bias = random_normal({24}, dt, 41);
    const Tensor a1 = random_normal({3, 16}, dt, 42, 0.0, 0.3), b1 = random_normal({24, 3}, dt, 43, 0.0, 0.3);
    const Tensor a2 = random_normal({2, 16}, dt, 44, 0.0, 0.3), b2 = random_normal({24, 2}, dt, 45, 0.0, 0.3);
    const Tensor x = random_normal({4, 5, 16}, dt, 46);
    const Tensor gates = random_normal({4, 24}, dt, 47);
    const Tensor acc0 = random_normal({4, 5, 24}, dt, 48);
    const Tensor rows2d = random_normal({4, 16}, dt, 49);
    const Tensor gate = random_normal({24}, dt, 50);
    const Tensor residual = random_normal({4, 24}, dt, 51);
    // Element 0: branch 1; elements 1-2: branch 2; element 3: none.
    Linear batched = Linear::prepare(w, bias);
    batched.attach_low_rank(Linear::prepare(a1), Linear::prepare(b1), Linear::Rows{0, 1});
    batched.attach_low_rank(Linear::prepare(a2), Linear::prepare(b2), Linear::Rows{1, 2});
    std::vector<Linear> alone(3, Linear());
    alone[0] = Linear::prepare(w, bias);
    alone[0].attach_low_rank(Linear::prepare(a1), Linear::prepare(b1));
    alone[1] = Linear::prepare(w, bias);
    alone[1].attach_low_rank(Linear::prepare(a2), Linear::prepare(b2));
    alone[2] = Linear::prepare(w, bias);
    struct Run {
      int64_t begin, count;
      const Linear* layer;
    };
    const std::vector<Run> runs{{0, 1, &alone[0]}, {1, 2, &alone[1]}, {3, 1, &alone[2]}};
    auto forms = [&](const Linear& l, int64_t begin, int64_t count) {
      const Tensor xs = x.narrow(0, begin, count);
      std::vector<Tensor> out;
      for (Activation act : {Activation::None, Activation::GeluTanh, Activation::Silu}) {
        out.push_back(l(xs, act));
        const Tensor y = Tensor::empty({count, 5, 24}, dt);
        l.forward_into(xs, y, act);
        out.push_back(y);
      }
      Tensor acc = acc0.narrow(0, begin, count).clone();
      l.add_gated_residual(xs, gates.narrow(0, begin, count), acc);
      out.push_back(acc);
      const Tensor g = Tensor::empty({count, 24}, dt);
      l.gated_residual_into(rows2d.narrow(0, begin, count), gate, residual.narrow(0, begin, count), g,
                            Activation::GeluTanh);
      out.push_back(g);
      return out;
    };
    const std::vector<Tensor> got = forms(batched, 0, 4);
    for (const Run& r : runs) {
      const std::vector<Tensor> want = forms(*r.layer, r.begin, r.count);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(all_close(got[i].narrow(0, r.begin, r.count), want[i], TolClass::Exact))
            << dtype_name(dt) << " form " << i << " elements from " << r.begin;
    }
    // Not vacuous: the branches change their elements.
    EXPECT_FALSE(
        all_close(got[0].narrow(0, 0, 1), Linear::prepare(w, bias)(x.narrow(0, 0, 1)), TolClass::Exact));
    // A branch past the input's elements is a logic error, not a silent skip.
    EXPECT_THROW((void)batched(x.narrow(0, 0, 2)), Error);
  }
}

TEST(NnLinear, LowRankBranchShapesChecked) {
  Linear lin = Linear::prepare(random_normal({8, 4}, DType::F32, 1));
  EXPECT_THROW(lin.attach_low_rank(Linear::prepare(random_normal({2, 5}, DType::F32, 2)),
                                   Linear::prepare(random_normal({8, 2}, DType::F32, 3))),
               Error);
  EXPECT_EQ(lin.low_rank_branches(), 0u);
}

}  // namespace
}  // namespace fluxrt::nn
