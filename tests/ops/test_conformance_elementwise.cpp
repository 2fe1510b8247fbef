// Conformance of the element-wise ops, activations, GLUs, gated residual, softmax, embedding and
// concat/split on every backend against ref.
#include "conformance_common.h"
#include "ops/elementwise.h"

namespace fluxrt::test {
namespace {

std::vector<std::vector<int64_t>> edge_shapes() {
  std::vector<std::vector<int64_t>> s{{2, 3, 5}, {4, 1000}, {1, 40000}};  // 40000: several column blocks
  for (int64_t d : kEdgeSizes) s.push_back({3, d});
  return s;
}

// ---- activations and scale ----

class Unary : public ::testing::TestWithParam<OpCase> {};

TEST_P(Unary, MatchesRef) {
  const OpCase& c = GetParam();
  // GELU/SiLU see their whole interesting range, tails included.
  const Tensor x = c.variant == "strided" ? random_strided(c.shape(), c.dtype, 51)
                                          : random_uniform(c.shape(), c.dtype, 51, -12.0, 12.0);
  for (const char* op : {"silu", "gelu_tanh", "quick_gelu", "scale"}) {
    auto f = [&] {
      const std::string o = op;
      if (o == "silu") return ops::silu(x);
      if (o == "gelu_tanh") return ops::gelu_tanh(x);
      if (o == "quick_gelu") return ops::quick_gelu(x);
      return ops::scale(x, 0.0883883476f);
    };
    const Tensor r = run_on("ref", f), y = run_on(c.backend, f);
    EXPECT_TRUE(all_close(y, r, std::string(op) == "scale" ? TolClass::Elementwise : TolClass::Transcendental))
        << op;
  }
}
INSTANTIATE_TEST_SUITE_P(Conformance, Unary,
                         ::testing::ValuesIn(make_cases(edge_shapes(), {}, {DType::F32, DType::BF16, DType::F16},
                                                        {"", "strided"})),
                         case_name);

TEST(UnaryInPlace, ScaleMatches) {
  Tensor x = random_normal({3, 33}, DType::BF16, 5);
  const Tensor r = run_on("ref", [&] { return ops::scale(x, 3.0f); });
  ops::scale_(x, 3.0f);
  EXPECT_TRUE(all_close(x, r, TolClass::Elementwise));
  // In place on a view with strided rows, and a 0-d tensor keeps its shape.
  Tensor s = random_strided({4, 9}, DType::F32, 6);
  const Tensor rs = run_on("ref", [&] { return ops::scale(s, -2.0f); });
  ops::scale_(s, -2.0f);
  EXPECT_TRUE(all_close(s, rs, TolClass::Elementwise));
  const Tensor scalar = Tensor::full({}, DType::F32, 2.0);
  const Tensor y = ops::silu(scalar);
  EXPECT_EQ(y.dim(), 0);
  EXPECT_NEAR(y.item({}), 2.0 / (1.0 + std::exp(-2.0)), 1e-6);
}

// ---- add / mul with broadcasting of a trailing-dims operand ----

class Binary : public ::testing::TestWithParam<OpCase> {};

TEST_P(Binary, MatchesRef) {
  const OpCase& c = GetParam();
  const Shape s = c.shape();
  const Tensor a = c.variant == "strided" ? random_strided(s, c.dtype, 61) : random_normal(s, c.dtype, 61);
  Tensor b;
  if (c.variant == "row") b = random_normal({s[s.size() - 1]}, c.dtype, 62);  // [D] over all rows
  else if (c.variant == "col") b = random_normal({s[0], 1}, c.dtype, 62).reshape({s[0], 1});
  else b = random_normal(s, c.dtype, 62);
  if (c.variant == "col" && s.size() != 2) GTEST_SKIP() << "per-row scalar case is 2-D";
  for (bool add : {true, false}) {
    auto f = [&] { return add ? ops::add(a, b) : ops::mul(a, b); };
    const Tensor r = run_on("ref", f), y = run_on(c.backend, f);
    EXPECT_TRUE(all_close(y, r, TolClass::Elementwise)) << (add ? "add" : "mul");
  }
  Tensor inplace = a.clone();
  run_on(c.backend, [&] {
    ops::add_(inplace, b);
    return 0;
  });
  EXPECT_TRUE(all_close(inplace, run_on("ref", [&] { return ops::add(a, b); }), TolClass::Elementwise));
}
INSTANTIATE_TEST_SUITE_P(Conformance, Binary,
                         ::testing::ValuesIn(make_cases({{3, 7}, {4, 129}, {2, 40000}, {3, 1}}, {"R", "D"},
                                                        {DType::F32, DType::BF16, DType::F16},
                                                        {"", "row", "col", "strided"})),
                         case_name);

// ---- SwiGLU [.., 2M] -> [.., M] and T5 gated GELU ----

class Glu : public ::testing::TestWithParam<OpCase> {};

TEST_P(Glu, MatchesRef) {
  const OpCase& c = GetParam();
  Shape s2 = c.shape();
  s2[s2.size() - 1] *= 2;
  const Tensor x = random_uniform(s2, c.dtype, 71, -8.0, 8.0);
  const Tensor r = run_on("ref", [&] { return ops::swiglu(x); });
  const Tensor y = run_on(c.backend, [&] { return ops::swiglu(x); });
  EXPECT_TRUE(all_close(y, r, TolClass::Transcendental)) << "swiglu";
  const Tensor g = random_uniform(c.shape(), c.dtype, 72, -8.0, 8.0);
  const Tensor u = random_normal(c.shape(), c.dtype, 73);
  const Tensor rg = run_on("ref", [&] { return ops::gated_gelu(g, u); });
  const Tensor yg = run_on(c.backend, [&] { return ops::gated_gelu(g, u); });
  EXPECT_TRUE(all_close(yg, rg, TolClass::Transcendental)) << "gated_gelu";
}

std::vector<OpCase> glu_cases() {
  auto shapes = edge_shapes();
  shapes.push_back({1, 64, 9216});  // FLUX.2 klein-4B MLP (M = 3D)
  return make_cases(shapes, {}, {DType::F32, DType::BF16, DType::F16});
}
INSTANTIATE_TEST_SUITE_P(Conformance, Glu, ::testing::ValuesIn(glu_cases()), case_name);

// The SwiGLU halves are (gate, up) in that order: silu(first) * second.
TEST(GluContract, FirstHalfIsGate) {
  const Tensor x = Tensor::from_vector({2.0f, 3.0f}, {1, 2});
  const float want = 2.0f / (1.0f + std::exp(-2.0f)) * 3.0f;
  EXPECT_NEAR(ops::swiglu(x).item({0, 0}), want, 1e-6);
}

// ---- gated residual x + gate * y, gate [B, D] a chunk of the modulation vector ----

class GatedResidual : public ::testing::TestWithParam<OpCase> {};

TEST_P(GatedResidual, MatchesRef) {
  const OpCase& c = GetParam();
  const int64_t B = c.dims[0], D = c.dims[2];
  const Tensor x = c.variant == "strided" ? random_strided(c.shape(), c.dtype, 81) : random_normal(c.shape(), c.dtype, 81);
  const Tensor y = random_normal(c.shape(), c.dtype, 82);
  const Tensor gate = random_normal({B, 6 * D}, c.dtype, 83).narrow(1, 2 * D, D);
  const Tensor r = run_on("ref", [&] { return ops::gated_residual(x, gate, y); });
  const Tensor out = run_on(c.backend, [&] {
    if (c.variant != "inplace") return ops::gated_residual(x, gate, y);
    Tensor t = x.clone();
    ops::gated_residual_(t, gate, y);
    return t;
  });
  EXPECT_TRUE(all_close(out, r, TolClass::Elementwise));
}

std::vector<OpCase> gated_cases() {
  std::vector<std::vector<int64_t>> shapes{{1, 5, 64}, {2, 3, 96}, {2, 19, 3072}};
  for (int64_t d : kEdgeSizes) shapes.push_back({2, 3, d});
  // The real FLUX shapes are in test_conformance_slow.cpp.
  return make_cases(shapes, {"B", "L", "D"}, {DType::F32, DType::BF16, DType::F16}, {"", "strided", "inplace"});
}
INSTANTIATE_TEST_SUITE_P(Conformance, GatedResidual, ::testing::ValuesIn(gated_cases()), case_name);

// ---- softmax over the last dim ----

class Softmax : public ::testing::TestWithParam<OpCase> {};

TEST_P(Softmax, MatchesRef) {
  const OpCase& c = GetParam();
  const Tensor x = c.variant == "strided" ? random_strided(c.shape(), c.dtype, 91)
                                          : random_uniform(c.shape(), c.dtype, 91, -30.0, 30.0);
  const Tensor r = run_on("ref", [&] { return ops::softmax(x); });
  const Tensor y = run_on(c.backend, [&] { return ops::softmax(x); });
  EXPECT_TRUE(all_close(y, r, TolClass::Norm));
}
INSTANTIATE_TEST_SUITE_P(Conformance, Softmax,
                         ::testing::ValuesIn(make_cases(edge_shapes(), {}, {DType::F32, DType::BF16, DType::F16},
                                                        {"", "strided"})),
                         case_name);

// Masked scores (-inf) get exactly zero probability; the rest renormalise.
TEST(SoftmaxContract, MinusInfinityIsMasked) {
  for (DType dt : {DType::F32, DType::BF16}) {
    std::vector<float> v(2 * 19, 0.5f);
    for (int i = 0; i < 19; i += 3) v[i] = -INFINITY;
    v[19 + 4] = 3.0f;
    const Tensor x = Tensor::from_vector(v, {2, 19}, dt);
    const Tensor r = run_on("ref", [&] { return ops::softmax(x); });
    const Tensor y = run_on("cpu", [&] { return ops::softmax(x); });
    EXPECT_TRUE(all_close(y, r, TolClass::Norm)) << dtype_name(dt);
    EXPECT_EQ(y.item({0, 3}), 0.0);
  }
}

// ---- embedding lookup ----

class Embedding : public ::testing::TestWithParam<OpCase> {};

TEST_P(Embedding, MatchesRef) {
  const OpCase& c = GetParam();
  const int64_t V = 1000, D = c.dims[1];
  const Tensor table = random_normal({V, D}, c.dtype, 101);
  for (DType id_dtype : {DType::I32, DType::I64})
    for (DType out : {DType::F32, DType::BF16}) {
      const Tensor ids = random_ids({2, c.dims[0]}, id_dtype, 102, V);
      const Tensor r = run_on("ref", [&] { return ops::embedding(table, ids, out); });
      const Tensor y = run_on(c.backend, [&] { return ops::embedding(table, ids, out); });
      EXPECT_TRUE(all_close(y, r, TolClass::Exact)) << dtype_name(id_dtype) << " -> " << dtype_name(out);
      EXPECT_EQ(y.shape(), Shape({2, c.dims[0], D}));
    }
}
INSTANTIATE_TEST_SUITE_P(Conformance, Embedding,
                         ::testing::ValuesIn(make_cases({{7, 1}, {77, 768}, {16, 129}}, {"N", "D"},
                                                        {DType::F32, DType::BF16, DType::F16})),
                         case_name);

TEST(EmbeddingErrors, IdOutOfRange) {
  const Tensor table = Tensor::zeros({10, 4}, DType::F32);
  const Tensor ids = Tensor::from_vector({1, 10}, {2}, DType::I64);
  try {
    ops::embedding(table, ids, DType::F32);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[embedding] id 10"), std::string::npos) << e.what();
  }
}

// ---- concat / split along the sequence dim (text first, then image: FLUX's order) ----

TEST(ConcatSplit, RoundTripsAlongSequence) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor txt = random_normal({2, 5, 24}, dt, 111), img = random_strided({2, 9, 24}, dt, 112);
    const Tensor both = ops::concat({txt, img}, 1);
    ASSERT_EQ(both.shape(), Shape({2, 14, 24}));
    EXPECT_TRUE(both.is_contiguous());
    const auto parts = ops::split(both, {5, 9}, 1);
    EXPECT_TRUE(all_close(parts[0], txt, TolClass::Exact));
    EXPECT_TRUE(all_close(parts[1], img, TolClass::Exact));
    EXPECT_DOUBLE_EQ(both.item({1, 4, 3}), txt.item({1, 4, 3}));  // text first
  }
  EXPECT_THROW(ops::concat({Tensor::zeros({2, 3}, DType::F32), Tensor::zeros({3, 3}, DType::F32)}, 1), Error);
  EXPECT_THROW(ops::split(Tensor::zeros({2, 3}, DType::F32), {1, 1}, 1), Error);
}

}  // namespace
}  // namespace fluxrt::test
