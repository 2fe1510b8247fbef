// The nn blocks (modulation, QK-norm attention, MLPs) against the same math written with plain
// ops: bitwise equal on the CPU backend (a block is only that composition, so moving a model onto
// it keeps its goldens), and within the module tolerance of the composition on the ref backend.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "backend/kernel_table.h"
#include "core/error.h"
#include "nn/attention.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/modulation.h"
#include "ops/attention.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "support/compare.h"
#include "support/random_tensor.h"

namespace fluxrt::nn {
namespace {

using test::all_close;
using test::random_normal;
using test::TolClass;

template <typename Fn>
Tensor on_ref(Fn&& fn) {
  ops::ScopedKernelTable force(backend::ref_kernels());
  return fn();
}

// Plain-ops linear, prepared on whichever backend is current.
Tensor plain_linear(const Tensor& x, const Tensor& w, ops::Activation act = ops::Activation::None) {
  return ops::linear(x, *ops::prepare_linear(w), act);
}

Tensor weight(int64_t n, int64_t k, uint64_t seed) {
  return random_normal({n, k}, DType::F32, seed, 0.0, 1.0 / std::sqrt(static_cast<double>(k)));
}

TEST(NnModulation, ChunksAndAdaLn) {
  const int64_t B = 2, L = 5, D = 16;
  const Tensor w = weight(6 * D, D, 1);
  const Tensor emb = random_normal({B, D}, DType::F32, 2);
  const Tensor x = random_normal({B, L, D}, DType::F32, 3);
  const Modulation mod{Linear::prepare(w), 2};
  const std::vector<AdaLnParams> p = mod(emb);
  ASSERT_EQ(p.size(), 2u);
  auto plain = [&] {
    const Tensor m = plain_linear(emb, w);  // [B, 6D]: shift, scale, gate of attention then MLP
    const Tensor n = ops::adaln_modulate(x, m.narrow(1, 3 * D, D), m.narrow(1, 4 * D, D), 1e-6f);
    return ops::concat({n, ops::gated_residual(x, m.narrow(1, 5 * D, D), n)}, 2);
  };
  const Tensor n = adaln(x, p[1], 1e-6f);
  const Tensor y = ops::concat({n, ops::gated_residual(x, p[1].gate, n)}, 2);  // [B, L, 2D]
  EXPECT_TRUE(all_close(y, plain(), TolClass::Exact));
  EXPECT_TRUE(all_close(y, on_ref(plain), TolClass::ModuleGolden));
  EXPECT_TRUE(all_close(p[0].shift, mod.lin(emb).narrow(1, 0, D), TolClass::Exact));
}

struct AttentionCase {
  int64_t heads, kv_heads;
  ops::RmsRounding rounding;
  bool rope_half_split;  // else FLUX adjacent pairs
  bool causal;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.heads << "x" << c.kv_heads << " heads"
      << (c.rope_half_split ? ", half-split RoPE" : ", adjacent-pair RoPE") << (c.causal ? ", causal" : "");
}

class NnQkNormAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(NnQkNormAttention, MatchesPlainOps) {
  const AttentionCase c = GetParam();
  const int64_t B = 2, L = 9, D = 32, hd = 16;
  const Tensor wq = weight(c.heads * hd, D, 1), wk = weight(c.kv_heads * hd, D, 2),
               wv = weight(c.kv_heads * hd, D, 3), wo = weight(D, c.heads * hd, 4);
  const Tensor qn = random_normal({hd}, DType::F32, 5, 1.0, 0.1),
               kn = random_normal({hd}, DType::F32, 6, 1.0, 0.1);
  const Tensor x = random_normal({B, L, D}, DType::F32, 7);
  ops::AttentionOptions opt;
  opt.causal = c.causal;
  ops::RopeTable rope;
  if (c.rope_half_split) {
    rope = ops::rope_rotate_half(L, hd);
    opt.rope = ops::RopeLayout::HalfSplit;
  } else {
    const int64_t axes[] = {8, 8};
    std::vector<float> ids(L * 2);
    for (int64_t l = 0; l < L; ++l) ids[l * 2 + 1] = static_cast<float>(l);
    rope = ops::rope_flux(Tensor::from_vector(ids, {L, 2}), axes, 10000.0);
    opt.rope = ops::RopeLayout::AdjacentPairs;
  }
  opt.rope_table = rope;

  QkNormAttention attn;
  attn.to_q = Linear::prepare(wq);
  attn.to_k = Linear::prepare(wk);
  attn.to_v = Linear::prepare(wv);
  attn.to_out = Linear::prepare(wo);
  attn.norm = {qn, kn, 1e-6f, c.rounding};
  attn.heads = c.heads;
  attn.kv_heads = c.kv_heads;
  attn.head_dim = hd;
  const Tensor y = attn(x, opt);  // [B, L, D]
  ASSERT_EQ(y.shape(), (Shape{B, L, D}));

  auto plain = [&] {
    const Tensor q = ops::rms_norm(plain_linear(x, wq).view({B, L, c.heads, hd}), qn, 1e-6f, c.rounding);
    const Tensor k = ops::rms_norm(plain_linear(x, wk).view({B, L, c.kv_heads, hd}), kn, 1e-6f, c.rounding);
    const Tensor v = plain_linear(x, wv).view({B, L, c.kv_heads, hd});
    return plain_linear(ops::attention(q, k, v, opt).view({B, L, c.heads * hd}), wo);
  };
  EXPECT_TRUE(all_close(y, plain(), TolClass::Exact));
  EXPECT_TRUE(all_close(y, on_ref(plain), TolClass::ModuleGolden));

  // heads_of on the columns of one fused projection (FLUX.2 single blocks) = project().
  const Tensor fused = plain_linear(x, ops::concat({wq, wk, wv}, 0));  // [B, L, (H + 2 Hkv) hd]
  const QkvHeads from_columns =
      attn.heads_of(fused.narrow(2, 0, c.heads * hd), fused.narrow(2, c.heads * hd, c.kv_heads * hd),
                    fused.narrow(2, (c.heads + c.kv_heads) * hd, c.kv_heads * hd));
  const QkvHeads projected = attn.project(x);
  EXPECT_TRUE(all_close(from_columns.q, projected.q, TolClass::ModuleGolden));
  EXPECT_TRUE(all_close(from_columns.v, projected.v, TolClass::ModuleGolden));

  // attend_into the first columns of a wider buffer (a FLUX single block's [attention ; MLP]) =
  // attend(), the other columns untouched.
  const int64_t width = c.heads * hd;
  Tensor buffer = Tensor::full({B, L, width + 5}, DType::F32, 7.0);
  attend_into(projected, opt, buffer.narrow(2, 0, width));
  EXPECT_TRUE(all_close(buffer.narrow(2, 0, width), attend(projected, opt), TolClass::Exact));
  EXPECT_TRUE(
      all_close(buffer.narrow(2, width, 5), Tensor::full({B, L, 5}, DType::F32, 7.0), TolClass::Exact));
  EXPECT_THROW(attend_into(projected, opt, buffer.narrow(2, 0, width - 1)), Error);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, NnQkNormAttention,
    ::testing::Values(AttentionCase{2, 2, ops::RmsRounding::Once, false, false},         // FLUX
                      AttentionCase{4, 2, ops::RmsRounding::BeforeWeight, true, true}),  // Qwen3
    [](const auto& info) { return info.index == 0 ? std::string("flux") : std::string("qwen3"); });

TEST(NnQkNormAttention, SplitHeadsOfStridedColumnsIsAView) {
  const Tensor t = random_normal({2, 3, 24}, DType::F32, 1);
  const Tensor cols = t.narrow(2, 8, 8);  // strided rows
  const Tensor h = split_heads(cols, 2, 4);
  ASSERT_EQ(h.shape(), (Shape{2, 3, 2, 4}));
  EXPECT_EQ(h.storage(), t.storage());  // no copy
  EXPECT_TRUE(all_close(h, cols.contiguous().view({2, 3, 2, 4}), TolClass::Exact));
  // A last dim that is not contiguous is copied.
  const Tensor transposed = t.narrow(2, 0, 6).transpose(1, 2);  // [2, 6, 3], last stride 24
  const Tensor ht = split_heads(transposed, 3, 1);
  EXPECT_NE(ht.storage(), t.storage());
  EXPECT_TRUE(all_close(ht, transposed.contiguous().view({2, 6, 3, 1}), TolClass::Exact));
}

class NnMlp : public ::testing::TestWithParam<int> {};

TEST_P(NnMlp, MatchesPlainOps) {
  const int64_t B = 2, L = 4, D = 16, M = 24;
  const Tensor x = random_normal({B, L, D}, DType::F32, 1);
  const Tensor w_in = weight(M, D, 2), w_fused = weight(2 * M, D, 3), w_up = weight(M, D, 4),
               w_out = weight(D, M, 5);
  Mlp mlp;
  mlp.out = Linear::prepare(w_out);
  std::function<Tensor()> plain;
  switch (GetParam()) {
    case 0:  // FLUX.1: GELU-tanh fused into the GEMM epilogue
      mlp.kind = MlpKind::GeluTanh;
      mlp.in = Linear::prepare(w_in);
      plain = [&] { return plain_linear(plain_linear(x, w_in, ops::Activation::GeluTanh), w_out); };
      break;
    case 1:  // CLIP
      mlp.kind = MlpKind::QuickGelu;
      mlp.in = Linear::prepare(w_in);
      plain = [&] { return plain_linear(ops::quick_gelu(plain_linear(x, w_in)), w_out); };
      break;
    case 2:  // FLUX.2: one [2M, D] projection
      mlp.kind = MlpKind::SwiGlu;
      mlp.in = Linear::prepare(w_fused);
      plain = [&] { return plain_linear(ops::swiglu(plain_linear(x, w_fused)), w_out); };
      break;
    case 3:  // Qwen3: gate_proj and up_proj
      mlp.kind = MlpKind::SwiGlu;
      mlp.in = Linear::prepare(w_in);
      mlp.up = Linear::prepare(w_up);
      plain = [&] {
        return plain_linear(ops::silu_mul(plain_linear(x, w_in), plain_linear(x, w_up)), w_out);
      };
      break;
    default:  // T5: wi_0 and wi_1 stacked
      mlp.kind = MlpKind::GatedGeluTanh;
      mlp.in = Linear::prepare(w_fused);
      plain = [&] {
        const Tensor wi = plain_linear(x, w_fused);
        return plain_linear(ops::gated_gelu(wi.narrow(2, 0, M), wi.narrow(2, M, M)), w_out);
      };
      break;
  }
  const Tensor y = mlp(x);  // [B, L, D]
  ASSERT_EQ(y.shape(), (Shape{B, L, D}));
  EXPECT_TRUE(all_close(y, plain(), TolClass::Exact));
  EXPECT_TRUE(all_close(y, on_ref(plain), TolClass::ModuleGolden));

  // hidden_into the last columns of a wider buffer (a FLUX single block's [attention ; MLP]) =
  // hidden(), the other columns untouched.
  Tensor buffer = Tensor::full({B, L, 3 + M}, DType::F32, 7.0);
  mlp.hidden_into(x, buffer.narrow(2, 3, M));
  EXPECT_TRUE(all_close(buffer.narrow(2, 3, M), mlp.hidden(x), TolClass::Exact));
  EXPECT_TRUE(all_close(buffer.narrow(2, 0, 3), Tensor::full({B, L, 3}, DType::F32, 7.0), TolClass::Exact));
}

std::string mlp_case_name(const ::testing::TestParamInfo<int>& info) {
  const char* names[] = {"gelu_tanh", "quick_gelu", "swiglu_fused", "swiglu_gate_up", "gated_gelu_fused"};
  return names[info.param];
}

INSTANTIATE_TEST_SUITE_P(Kinds, NnMlp, ::testing::Range(0, 5), mlp_case_name);

TEST(NnMlp, ActivateOnColumnsOfAFusedProjection) {
  // FLUX.2 single blocks: the SwiGLU input is a column slice of linear1's output.
  const Tensor h = random_normal({2, 3, 40}, DType::F32, 1);
  Mlp mlp;
  mlp.kind = MlpKind::SwiGlu;
  const Tensor cols = h.narrow(2, 8, 32);
  EXPECT_TRUE(all_close(mlp.activate(cols), ops::swiglu(cols), TolClass::Exact));
  mlp.kind = MlpKind::GatedGeluTanh;
  EXPECT_TRUE(all_close(mlp.activate(cols), ops::gated_gelu(cols.narrow(2, 0, 16), cols.narrow(2, 16, 16)),
                        TolClass::Exact));
  // activate_into columns of another buffer, for both gated kinds and a plain one.
  for (MlpKind kind : {MlpKind::SwiGlu, MlpKind::GatedGeluTanh}) {
    mlp.kind = kind;
    Tensor buffer = Tensor::zeros({2, 3, 20}, DType::F32);
    mlp.activate_into(cols, buffer.narrow(2, 4, 16));
    EXPECT_TRUE(all_close(buffer.narrow(2, 4, 16), mlp.activate(cols), TolClass::Exact));
    EXPECT_THROW(mlp.activate_into(cols, buffer.narrow(2, 4, 15)), Error);  // wrong width
  }
  mlp.kind = MlpKind::QuickGelu;
  Tensor buffer = Tensor::zeros({2, 3, 40}, DType::F32);
  mlp.activate_into(cols, buffer.narrow(2, 8, 32));
  EXPECT_TRUE(all_close(buffer.narrow(2, 8, 32), mlp.activate(cols), TolClass::Exact));
}

}  // namespace
}  // namespace fluxrt::nn
