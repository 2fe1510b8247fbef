// Models loaded from GGUF files (tools/reference/make_tiny_gguf.py: the tiny FLUX.2 klein
// transformer quantized by the gguf package, city96-style names, with and without ComfyUI's
// prefix). The quantized model must equal the same model built densely from the file's weights
// dequantized (the dequantization is checked against gguf bit for bit in tests/io), and keep only
// the quantized bytes resident.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/quant.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "models/flux/flux1_transformer.h"
#include "models/flux/flux2_names.h"
#include "models/flux/flux2_transformer.h"
#include "support/compare.h"
#include "support/dequantized_store.h"

namespace fluxrt::models {
namespace {

const std::string kData = FLUXRT_TEST_DATA_DIR;
const std::string kQ8 = kData + "/gguf/flux2-klein-tiny-q8_0.gguf";
const std::string kQ4Prefixed = kData + "/gguf/flux2-klein-tiny-q4_0.gguf";
const std::string kBfl = kData + "/models/flux2-klein-tiny-bfl.safetensors";

struct Case {
  Tensor x, x_ids, ctx, ctx_ids, t, out;
};

Case load_case() {
  const io::Checkpoint c = io::Checkpoint::open(kData + "/flux2_transformer/t2i.safetensors");
  return {c.tensor("x").clone(),       c.tensor("x_ids").clone(), c.tensor("ctx").clone(),
          c.tensor("ctx_ids").clone(), c.tensor("t").clone(),     c.tensor("out").clone()};
}

using test::dequantized_store;

class GgufFlux2 : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufFlux2, EqualsTheDenseModelOnTheDequantizedWeights) {
  const std::string& path = GetParam();
  Flux2LoadOptions opt;
  opt.dtype = DType::F32;
  const auto quantized = Flux2Transformer::load(path, opt);
  TensorStore raw = TensorStore::open(path);
  size_t quantized_entries = 0;
  for (const std::string& name : raw.names()) quantized_entries += raw.quantized(name) != nullptr;
  EXPECT_GE(quantized_entries, 18u);  // every 2-D weight but txt_in (rows of 24)
  const auto dense = Flux2Transformer::from_store(dequantized_store(raw), quantized->config(), opt);
  EXPECT_LT(quantized->weight_bytes() * 3, dense->weight_bytes()) << "quantized weights must stay quantized";

  const Case c = load_case();
  const Tensor y = quantized->forward(c.x, c.x_ids, c.ctx, c.ctx_ids, c.t);
  const Tensor y_dense = dense->forward(c.x, c.x_ids, c.ctx, c.ctx_ids, c.t);
  const auto same = test::compare(y, y_dense);
  EXPECT_LT(same.rel_l2, 1e-5) << "quantized GEMM vs dense GEMM on the same weights";
  // Against diffusers on the original bf16 weights: the quantization error itself (reported).
  const auto vs_bf16 = test::compare(y, c.out);
  EXPECT_LT(vs_bf16.rel_l2, 0.2);
  RecordProperty("rel_l2_vs_bf16_reference", std::to_string(vs_bf16.rel_l2));
  std::printf("%s: rel-L2 vs the bf16 reference %.4g\n", path.c_str(), vs_bf16.rel_l2);
}

INSTANTIATE_TEST_SUITE_P(TinyKlein, GgufFlux2, ::testing::Values(kQ8, kQ4Prefixed), [](const auto& info) {
  return info.index == 0 ? std::string("q8_0") : std::string("q4_0_comfy");
});

// A klein fp8 single file (BFL names; 2-D weights float8_e4m3fn with a per-row
// `.weight_scale`, compressed-tensors style, and an `.input_scale` that is dropped), made here
// from the tiny klein: the weights stay fp8 (about half the bf16 bytes), every split of a fused
// qkv / linear1 carries its rows' scales, and the model equals the dense one on the fp8 values
// dequantized by the scaled-fp8 rule.
TEST(Fp8Flux2, WeightsStayFp8AndComputeTheirDequantization) {
  const io::Checkpoint bfl = io::Checkpoint::open(kBfl);
  std::vector<std::pair<std::string, Tensor>> tensors;
  TensorStore dense;
  for (const std::string& name : bfl.names()) {
    const Tensor w = bfl.tensor(name).to(DType::F32).contiguous();
    if (w.dim() != 2) {
      tensors.emplace_back(name, bfl.tensor(name));
      dense.add(name, bfl.tensor(name));
      continue;
    }
    // Per-row scale amax / 448, so every row uses e4m3's range.
    const int64_t rows = w.size(0), cols = w.size(1);
    Tensor scale = Tensor::empty({rows}, DType::F32);
    Tensor scaled = Tensor::empty({rows, cols}, DType::F32);
    for (int64_t r = 0; r < rows; ++r) {
      float amax = 1e-12f;
      for (int64_t j = 0; j < cols; ++j) amax = std::max(amax, std::abs(w.data<float>()[r * cols + j]));
      scale.data<float>()[r] = amax / 448.0f;
      for (int64_t j = 0; j < cols; ++j)
        scaled.data<float>()[r * cols + j] = w.data<float>()[r * cols + j] / (amax / 448.0f);
    }
    const Tensor w8 = scaled.to(DType::F8E4M3);
    tensors.emplace_back(name, w8);
    const std::string base = name.substr(0, name.size() - std::string("weight").size());
    tensors.emplace_back(base + "weight_scale", scale);
    tensors.emplace_back(base + "input_scale", Tensor::from_vector({1.0f}, {1}));
    Tensor deq = Tensor::empty({rows, cols}, DType::F32);  // the scaled-fp8 rule, value by value
    const Tensor back = w8.to(DType::F32);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        deq.data<float>()[r * cols + j] =
            scaled_weight(back.data<float>()[r * cols + j], scale.data<float>()[r]);
    dense.add(name, deq);
  }
  const std::string path = ::testing::TempDir() + "fluxrt_klein_tiny_fp8.safetensors";
  io::write_safetensors(path, tensors);
  Flux2LoadOptions opt;
  opt.dtype = DType::F32;
  const auto fp8 = Flux2Transformer::load(path, opt);
  const auto reference = Flux2Transformer::from_store(dense, fp8->config(), opt);
  Flux2LoadOptions bf16_opt;
  const auto bf16 = Flux2Transformer::load(kBfl, bf16_opt);
  const auto fp8_bf16 = Flux2Transformer::load(path, bf16_opt);
  EXPECT_LT(fp8_bf16->weight_bytes() * 10, bf16->weight_bytes() * 6) << "fp8 weights must stay fp8";

  const Case c = load_case();
  const Tensor y = fp8->forward(c.x, c.x_ids, c.ctx, c.ctx_ids, c.t);
  EXPECT_LT(test::compare(y, reference->forward(c.x, c.x_ids, c.ctx, c.ctx_ids, c.t)).rel_l2, 1e-5);
  const auto vs_bf16 = test::compare(y, c.out);
  EXPECT_LT(vs_bf16.rel_l2, 0.1);
  std::printf("klein fp8 (per-row scales) vs the bf16 reference: rel-L2 %.4g\n", vs_bf16.rel_l2);
  std::remove(path.c_str());
}

TEST(GgufStore, FusedQkvSplitsByRowBytes) {
  const TensorStore raw = TensorStore::open(kQ8);
  const TensorStore canonical = flux2_to_canonical(raw);
  const QuantizedMatrix* qkv = raw.quantized("double_blocks.0.img_attn.qkv.weight");
  const QuantizedMatrix* k = canonical.quantized("double_blocks.0.img_attn.k.weight");
  ASSERT_TRUE(qkv && k);
  EXPECT_EQ(k->rows * 3, qkv->rows);
  EXPECT_EQ(k->row(0), qkv->row(k->rows));
  // A quantized entry read densely is its dequantization.
  const Tensor dense = canonical.get("double_blocks.0.img_attn.k.weight");
  EXPECT_EQ(dense.shape(), Shape({k->rows, k->cols}));
  EXPECT_TRUE(test::all_close(dense.to(DType::F32), dequantize_ref(*k).to(DType::BF16).to(DType::F32),
                              test::TolClass::Exact));
}

// ---------------------------------------------------------------------------------------------
// FLUX.1: the tiny dev transformer of the module goldens (tests/data/flux1_transformer), written
// by the gguf package as Q8_0 and as Q4_1 with ComfyUI's prefix. Fused qkv and linear1 (q, k, v,
// mlp of unequal widths) split by rows of bytes, biases stay F32.

const std::string kFlux1Q8 = kData + "/gguf/flux1-dev-tiny-q8_0.gguf";
const std::string kFlux1Q4Prefixed = kData + "/gguf/flux1-dev-tiny-q4_1.gguf";

class GgufFlux1 : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufFlux1, EqualsTheDenseModelOnTheDequantizedWeights) {
  const std::string& path = GetParam();
  Flux1LoadOptions opt;
  opt.dtype = DType::F32;
  const auto quantized = Flux1Transformer::load(path, opt);
  EXPECT_TRUE(quantized->config().guidance);
  const TensorStore raw = TensorStore::open(path);
  size_t quantized_entries = 0;
  for (const std::string& name : raw.names()) quantized_entries += raw.quantized(name) != nullptr;
  EXPECT_GE(quantized_entries, 23u);  // every 2-D weight
  const auto dense = Flux1Transformer::from_store(dequantized_store(raw), quantized->config(), opt);
  EXPECT_LT(quantized->weight_bytes() * 2, dense->weight_bytes()) << "quantized weights must stay quantized";
  size_t quantized_linears = 0;
  for (const auto& [name, layer] : quantized->linears()) quantized_linears += layer.quantized() != nullptr;
  EXPECT_GE(quantized_linears, 20u) << "the split q/k/v/mlp weights must stay quantized";

  const io::Checkpoint c = io::Checkpoint::open(kData + "/flux1_transformer/dev.safetensors");
  auto get = [&](const char* n) { return c.tensor(n).clone(); };
  const Tensor x = get("x"), x_ids = get("x_ids"), ctx = get("ctx"), ctx_ids = get("ctx_ids"),
               pooled = get("pooled"), t = get("t"), g = get("g");
  const Tensor y = quantized->forward(x, x_ids, ctx, ctx_ids, pooled, t, g);
  const Tensor y_dense = dense->forward(x, x_ids, ctx, ctx_ids, pooled, t, g);
  EXPECT_LT(test::compare(y, y_dense).rel_l2, 1e-5) << "quantized GEMM vs dense GEMM on the same weights";
  const auto vs_bf16 = test::compare(y, get("out"));
  EXPECT_LT(vs_bf16.rel_l2, 0.2);
  std::printf("%s: rel-L2 vs the bf16 reference %.4g\n", path.c_str(), vs_bf16.rel_l2);
}

INSTANTIATE_TEST_SUITE_P(TinyDev, GgufFlux1, ::testing::Values(kFlux1Q8, kFlux1Q4Prefixed),
                         [](const auto& info) {
                           return info.index == 0 ? std::string("q8_0") : std::string("q4_1_comfy");
                         });

}  // namespace
}  // namespace fluxrt::models
