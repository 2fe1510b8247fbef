// LyCORIS LoKr / LoHa and DoRA modules (issue 46, docs/lora.md) on small in-memory files: each
// kind's delta and scale rule against the formula written out here element by element, DoRA's two
// norm axes (an input-axis norm spanning a fused module's split targets), the order DoRA applies
// in, the per-request merged copy on nn::Linear, and one-line errors naming the file and the key
// for malformed modules. The images are checked against the trainers' math in
// tests/pipelines/test_lora_lycoris.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/flux/flux_lora_names.h"
#include "models/lora/lora_delta.h"
#include "models/lora/lora_file.h"
#include "models/lora/lora_math.h"
#include "nn/linear.h"
#include "support/random_tensor.h"

namespace fluxrt::models {
namespace {

using test::random_normal;

Tensor scalar(float v) { return Tensor::from_vector({v}, Shape{}); }

double at(const Tensor& t, int64_t i, int64_t j) { return t.item({i, j}); }

// a @ b, element by element.
double product(const Tensor& a, const Tensor& b, int64_t i, int64_t j) {
  double s = 0;
  for (int64_t k = 0; k < a.size(1); ++k) s += at(a, i, k) * at(b, k, j);
  return s;
}

void expect_close(const Tensor& actual, const std::function<double(int64_t, int64_t)>& want,
                  const char* what) {
  for (int64_t i = 0; i < actual.size(0); ++i)
    for (int64_t j = 0; j < actual.size(1); ++j) {
      const double w = want(i, j);
      ASSERT_NEAR(at(actual, i, j), w, 1e-5 * (1 + std::abs(w))) << what << " [" << i << ", " << j << "]";
    }
}

LoraModule only_module(const LoraFile& f) {
  EXPECT_EQ(f.modules.size(), 1u);
  return f.modules.at(0);
}

// kron(w1, w2): element (i*c + k, j*d + l) = w1[i, j] * w2[k, l].
double kron_at(const std::function<double(int64_t, int64_t)>& w1,
               const std::function<double(int64_t, int64_t)>& w2, int64_t c, int64_t d, int64_t row,
               int64_t col) {
  return w1(row / c, col / d) * w2(row % c, col % d);
}

TEST(LoraLokr, EachHalfWholeOrDecomposedWithItsScaleRule) {
  const Tensor w1 = random_normal({2, 3}, DType::F32, 1), w2 = random_normal({4, 2}, DType::F32, 2);
  const Tensor w1a = random_normal({2, 5}, DType::F32, 3), w1b = random_normal({5, 3}, DType::F32, 4);
  const Tensor w2a = random_normal({4, 6}, DType::F32, 5), w2b = random_normal({6, 2}, DType::F32, 6);
  auto whole = [](const Tensor& t) { return [t](int64_t i, int64_t j) { return at(t, i, j); }; };
  auto pair = [](const Tensor& a, const Tensor& b) {
    return [a, b](int64_t i, int64_t j) { return product(a, b, i, j); };
  };
  struct Case {
    const char* what;
    std::map<std::string, Tensor> tensors;
    std::function<double(int64_t, int64_t)> h1, h2;
    double factor;
  };
  const std::string k = "lora_unet_img_in.";
  const std::vector<Case> cases = {
      // alpha / dim with dim the decomposed half's rank (w2's: 6).
      {"w1 whole, w2 decomposed",
       {{k + "lokr_w1", w1}, {k + "lokr_w2_a", w2a}, {k + "lokr_w2_b", w2b}, {k + "alpha", scalar(3)}},
       whole(w1),
       pair(w2a, w2b),
       3.0 / 6},
      // w1's rank (5) when only w1 is decomposed.
      {"w1 decomposed, w2 whole",
       {{k + "lokr_w1_a", w1a}, {k + "lokr_w1_b", w1b}, {k + "lokr_w2", w2}, {k + "alpha", scalar(3)}},
       pair(w1a, w1b),
       whole(w2),
       3.0 / 5},
      // Both decomposed: w2's rank, as ComfyUI takes it.
      {"both decomposed",
       {{k + "lokr_w1_a", w1a},
        {k + "lokr_w1_b", w1b},
        {k + "lokr_w2_a", w2a},
        {k + "lokr_w2_b", w2b},
        {k + "alpha", scalar(3)}},
       pair(w1a, w1b),
       pair(w2a, w2b),
       3.0 / 6},
      // Both whole: alpha does not apply.
      {"both whole",
       {{k + "lokr_w1", w1}, {k + "lokr_w2", w2}, {k + "alpha", scalar(3)}},
       whole(w1),
       whole(w2),
       1.0},
      // No alpha: 1.
      {"no alpha",
       {{k + "lokr_w1", w1}, {k + "lokr_w2_a", w2a}, {k + "lokr_w2_b", w2b}},
       whole(w1),
       pair(w2a, w2b),
       1.0},
  };
  for (const Case& c : cases) {
    const LoraModule m = only_module(parse_lora(c.tensors, {}, "mem"));
    EXPECT_EQ(m.kind, LoraKind::LoKr) << c.what;
    EXPECT_EQ(m.delta_shape(), (Shape{8, 6})) << c.what;
    EXPECT_FLOAT_EQ(m.factor(), static_cast<float>(c.factor)) << c.what;
    const Tensor d = lora_module_delta(m);
    expect_close(
        d, [&](int64_t i, int64_t j) { return c.factor * kron_at(c.h1, c.h2, 4, 2, i, j); }, c.what);
  }
}

TEST(LoraLoha, HadamardOfTwoProductsTimesAlphaOverRank) {
  const std::string k = "diffusion_model.img_in.";
  const Tensor a1 = random_normal({5, 3}, DType::BF16, 1), b1 = random_normal({3, 4}, DType::BF16, 2);
  const Tensor a2 = random_normal({5, 3}, DType::BF16, 3), b2 = random_normal({3, 4}, DType::BF16, 4);
  const LoraModule m = only_module(parse_lora({{k + "hada_w1_a", a1},
                                               {k + "hada_w1_b", b1},
                                               {k + "hada_w2_a", a2},
                                               {k + "hada_w2_b", b2},
                                               {k + "alpha", scalar(1.5f)}},
                                              {}, "mem"));
  EXPECT_EQ(m.kind, LoraKind::LoHa);
  EXPECT_EQ(m.rank(), 3);
  expect_close(
      lora_module_delta(m),
      [&](int64_t i, int64_t j) { return 0.5 * product(a1, b1, i, j) * product(a2, b2, i, j); }, "loha");
}

// W' = W + s (m (W + dW) / ||W + dW|| - W): rows for an [out] / [out, 1] magnitude, columns for
// [1, in]; LyCORIS' dora_scale adds f32 epsilon to the norm, PEFT's magnitude does not.
TEST(LoraDora, RowAndColumnNormsAndStrength) {
  const Tensor w = random_normal({3, 4}, DType::F32, 1), d = random_normal({3, 4}, DType::F32, 2);
  auto v = [&](int64_t i, int64_t j) { return at(w, i, j) + at(d, i, j); };
  for (const bool per_column : {false, true})
    for (const float strength : {1.0f, 0.7f}) {
      const Tensor g = per_column ? random_normal({1, 4}, DType::F32, 3) : random_normal({3}, DType::F32, 4);
      Tensor out = w.clone();
      apply_dora({out}, {d}, g, per_column, strength);
      expect_close(
          out,
          [&](int64_t i, int64_t j) {
            double n = 0;
            for (int64_t x = 0; x < (per_column ? 3 : 4); ++x)
              n += per_column ? v(x, j) * v(x, j) : v(i, x) * v(i, x);
            const double mag = per_column ? g.item({0, j}) : g.item({i});
            const double dora = mag * v(i, j) / (std::sqrt(n) + (per_column ? 1.1920929e-7 : 0.0));
            return at(w, i, j) + strength * (dora - at(w, i, j));
          },
          per_column ? "columns" : "rows");
    }
}

// A fused BFL qkv module with an input-axis magnitude on FLUX.2's split q, k, v: the column norm
// spans all three targets (the fused weight the trainer saw); an output-axis one is row by row.
TEST(LoraDora, FusedModuleNormsOverItsWholeWeight) {
  const std::string k = "lora_unet_double_blocks_0_img_attn_qkv.";
  const int64_t D = 4;
  const Tensor down = random_normal({2, D}, DType::F32, 1), up = random_normal({3 * D, 2}, DType::F32, 2);
  TensorStore store;
  std::vector<Tensor> parts;
  for (const char* p : {"q", "k", "v"}) {
    parts.push_back(random_normal({D, D}, DType::F32, 10 + parts.size()));
    store.add(std::string("double_blocks.0.img_attn.") + p + ".weight", parts.back());
  }
  for (const bool per_column : {true, false}) {
    const Tensor g =
        per_column ? random_normal({1, D}, DType::F32, 5) : random_normal({3 * D, 1}, DType::F32, 6);
    const LoraFile f = parse_lora({{k + "lora_down.weight", down},
                                   {k + "lora_up.weight", up},
                                   {k + "alpha", scalar(2)},
                                   {k + "dora_scale", g}},
                                  {}, "mem");
    const std::vector<LoraDelta> deltas = lora_deltas(f, flux2_lora_scheme(), 0.7f, linear_shapes_of(store));
    ASSERT_EQ(deltas.size(), 3u);
    const TensorStore merged = merge_lora_deltas(store, deltas);
    // The fused weight, merged in one piece.
    Tensor fused = Tensor::empty({3 * D, D}, DType::F32);
    for (int i = 0; i < 3; ++i) fused.narrow(0, i * D, D).copy_from(parts[i]);
    const Tensor want = fused.clone();
    apply_dora({want}, {lora_matmul(up, down)}, g, true, 0.7f);
    for (int i = 0; i < 3; ++i) {
      const Tensor got = merged.get(std::string("double_blocks.0.img_attn.") + "qkv"[i] + ".weight");
      expect_close(
          got, [&](int64_t r, int64_t c) { return at(want, i * D + r, c); }, per_column ? "columns" : "rows");
    }
  }
}

// Deltas apply in order: a plain LoRA before a DoRA module is inside the DoRA norm; strength 0
// adds nothing, bit for bit.
TEST(LoraDora, AppliesAfterTheDeltasBeforeIt) {
  TensorStore store;
  const Tensor w = random_normal({4, 3}, DType::F32, 1);
  store.add("img_in.weight", w);
  const Tensor a = random_normal({2, 3}, DType::F32, 2), b = random_normal({4, 2}, DType::F32, 3);
  const Tensor w1 = random_normal({2, 1}, DType::F32, 4), w2 = random_normal({2, 3}, DType::F32, 5);
  const Tensor g = random_normal({4}, DType::F32, 6);
  // A PEFT magnitude (no epsilon) on a LoKr module.
  const LoraFile f = parse_lora(
      {{"img_in.lokr_w1", w1}, {"img_in.lokr_w2", w2}, {"img_in.lora_magnitude_vector", g}}, {}, "mem");
  const std::vector<LoraDelta> dora = lora_deltas(f, flux2_lora_scheme(), 1.0f, linear_shapes_of(store));
  ASSERT_EQ(dora.size(), 1u);
  const LoraDelta plain{"img_in.weight", a, b, 0.5f, "plain"};
  const Tensor got = merge_lora_deltas(store, {plain, dora[0]}).get("img_in.weight");
  const Tensor dw = lora_module_delta(f.modules.at(0));
  Tensor want = w.clone();
  Tensor ba = lora_matmul(b, a);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) want.data<float>()[i * 3 + j] += 0.5f * ba.data<float>()[i * 3 + j];
  apply_dora({want}, {dw}, g, false, 1.0f);
  expect_close(
      got, [&](int64_t i, int64_t j) { return at(want, i, j); }, "order");

  EXPECT_TRUE(lora_deltas(f, flux2_lora_scheme(), 0.0f, linear_shapes_of(store)).empty());
}

// Per request, a LoKr / LoHa / DoRA layer gets a merged copy of its weight (nn::Linear's
// replacement); plain LoRA layers keep their low-rank branch. Both detach with the attachment.
TEST(LoraAttachment, MergedCopyForLycorisBranchesForLora) {
  TensorStore store;
  store.add("img_in.weight", random_normal({4, 6}, DType::F32, 1));
  store.add("txt_in.weight", random_normal({4, 6}, DType::F32, 2));
  std::map<std::string, nn::Linear> linears;
  for (const char* n : {"img_in.weight", "txt_in.weight"}) linears[n] = nn::Linear::prepare(store.get(n));
  const LoraFile f = parse_lora({{"img_in.lokr_w1", random_normal({2, 2}, DType::F32, 3)},
                                 {"img_in.lokr_w2", random_normal({2, 3}, DType::F32, 4)},
                                 {"txt_in.lora_A.weight", random_normal({2, 6}, DType::F32, 5)},
                                 {"txt_in.lora_B.weight", random_normal({4, 2}, DType::F32, 6)}},
                                {}, "mem");
  const std::vector<LoraDelta> deltas = lora_deltas(f, flux2_lora_scheme(), 0.8f, linear_shapes_of(store));
  const TensorStore merged = merge_lora_deltas(store, deltas);
  const Tensor x = random_normal({3, 6}, DType::F32, 7);
  const Tensor base = linears["img_in.weight"](x);
  {
    LoraAttachment attach(linears, deltas, DType::F32, Device::cpu());
    EXPECT_EQ(attach.replaced_layers(), 1u);
    EXPECT_EQ(attach.layers(), 2u);
    EXPECT_TRUE(linears["img_in.weight"].replaced());
    EXPECT_EQ(linears["txt_in.weight"].low_rank_branches(), 1u);
    for (const char* n : {"img_in.weight", "txt_in.weight"}) {
      const Tensor want = nn::Linear::prepare(merged.get(n))(x), got = linears[n](x);
      expect_close(
          got, [&](int64_t i, int64_t j) { return at(want, i, j); }, n);
    }
  }
  EXPECT_FALSE(linears["img_in.weight"].replaced());
  EXPECT_EQ(linears["txt_in.weight"].low_rank_branches(), 0u);
  const Tensor after = linears["img_in.weight"](x);
  EXPECT_EQ(after.to_vector(), base.to_vector());
}

// On layers prepared in int8 (precision int8): the LoKr layer's merged copy is prepared in int8
// too (the layer remembers its format), the plain LoRA stays a bf16 branch beside the int8 base.
TEST(LoraAttachment, Int8LayersGetInt8MergedCopiesAndDenseBranches) {
  TensorStore store;
  store.add("img_in.weight", random_normal({32, 64}, DType::BF16, 11, 0.0, 0.1));
  store.add("txt_in.weight", random_normal({32, 64}, DType::BF16, 12, 0.0, 0.1));
  std::map<std::string, nn::Linear> linears;
  for (const char* n : {"img_in.weight", "txt_in.weight"})
    linears[n] = nn::Linear::prepare(store.get(n), Tensor(), Device::cpu(), nn::LinearFormat::Int8);
  const LoraFile f = parse_lora({{"img_in.lokr_w1", random_normal({4, 4}, DType::F32, 13)},
                                 {"img_in.lokr_w2", random_normal({8, 16}, DType::F32, 14, 0.0, 0.1)},
                                 {"txt_in.lora_A.weight", random_normal({2, 64}, DType::F32, 15)},
                                 {"txt_in.lora_B.weight", random_normal({32, 2}, DType::F32, 16, 0.0, 0.1)}},
                                {}, "mem");
  const std::vector<LoraDelta> deltas = lora_deltas(f, flux2_lora_scheme(), 1.0f, linear_shapes_of(store));
  const TensorStore merged = merge_lora_deltas(store, deltas);
  const Tensor x = random_normal({5, 64}, DType::BF16, 17);
  const Tensor base = linears["txt_in.weight"](x);
  LoraAttachment attach(linears, deltas, DType::BF16, Device::cpu());
  ASSERT_TRUE(linears["img_in.weight"].replaced());
  const Tensor w = merged.get("img_in.weight").to(DType::BF16).contiguous();
  const std::vector<float> got = linears["img_in.weight"](x).to_vector();
  EXPECT_EQ(got, nn::Linear::prepare(w, Tensor(), Device::cpu(), nn::LinearFormat::Int8)(x).to_vector());
  EXPECT_NE(got, nn::Linear::prepare(w)(x).to_vector()) << "the merged copy was prepared in bf16";
  // The branch: the int8 base plus x A^T B^T (the dense merged layer's difference from the dense
  // base, in f32), within the bf16 roundings of the sum.
  ASSERT_EQ(linears["txt_in.weight"].low_rank_branches(), 1u);
  const Tensor xf = x.to(DType::F32);
  const std::vector<float> merged_y =
      nn::Linear::prepare(merged.get("txt_in.weight").to(DType::F32))(xf).to_vector();
  const std::vector<float> dense_y =
      nn::Linear::prepare(store.get("txt_in.weight").to(DType::F32))(xf).to_vector();
  const std::vector<float> int8_base = base.to(DType::F32).to_vector();
  const std::vector<float> with_branch = linears["txt_in.weight"](x).to(DType::F32).to_vector();
  double delta_norm = 0;
  for (size_t i = 0; i < with_branch.size(); ++i) {
    const double want = int8_base[i] + (merged_y[i] - dense_y[i]);
    delta_norm += std::abs(merged_y[i] - dense_y[i]);
    ASSERT_NEAR(with_branch[i], want, 0.02 * (1 + std::abs(want))) << "txt_in [" << i << "]";
  }
  EXPECT_GT(delta_norm / static_cast<double>(with_branch.size()), 0.05) << "the branch is not vacuous";
}

// The LyCORIS and DoRA suffixes go after the module name in every key scheme fluxrt reads, the
// text encoders' included.
TEST(LoraKinds, EveryKeySchemeNamesTheSameModule) {
  const std::vector<std::pair<std::string, std::string>> stems = {
      {"lora_unet_double_blocks_0_img_attn_qkv", "double_blocks.0.img_attn.qkv"},         // kohya
      {"lycoris_double_blocks_0_img_attn_qkv", "double_blocks.0.img_attn.qkv"},           // LyCORIS
      {"diffusion_model.double_blocks.0.img_attn.qkv", "double_blocks.0.img_attn.qkv"},   // BFL / ComfyUI
      {"diffusion_model.double_blocks.0.img_attn_qkv", "double_blocks.0.img_attn.qkv"},   // musubi
      {"base_model.model.double_blocks.0.img_attn.qkv", "double_blocks.0.img_attn.qkv"},  // fal
      {"transformer.transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_q"},   // diffusers / PEFT
      {"lora_unet_transformer_blocks_0_attn_to_q",
       "transformer_blocks.0.attn.to_q"},  // kohya, diffusers names
      {"lora_transformer_transformer_blocks_0_attn_to_q", "transformer_blocks.0.attn.to_q"},  // OneTrainer
      {"lora_te1_text_model_encoder_layers_0_self_attn_q_proj",
       "text_encoder.encoder.layers.0.self_attn.q_proj"},
  };
  const Tensor a = random_normal({2, 3}, DType::F32, 1), b = random_normal({3, 2}, DType::F32, 2);
  for (const auto& [stem, module] : stems) {
    const LoraFile lokr =
        parse_lora({{stem + ".lokr_w1", a}, {stem + ".lokr_w2", b}, {stem + ".alpha", scalar(2)}}, {}, "mem");
    const LoraFile loha = parse_lora({{stem + ".hada_w1_a", b},
                                      {stem + ".hada_w1_b", a},
                                      {stem + ".hada_w2_a", b},
                                      {stem + ".hada_w2_b", a}},
                                     {}, "mem");
    const LoraFile dora = parse_lora({{stem + ".lora_down.weight", a},
                                      {stem + ".lora_up.weight", b},
                                      {stem + ".dora_scale", random_normal({1, 3}, DType::F32, 3)}},
                                     {}, "mem");
    for (const LoraFile* f : {&lokr, &loha, &dora}) {
      ASSERT_EQ(f->modules.size(), 1u) << stem;
      EXPECT_EQ(f->modules[0].module, module) << stem;
    }
    EXPECT_EQ(lokr.modules[0].kind, LoraKind::LoKr);
    EXPECT_EQ(loha.modules[0].kind, LoraKind::LoHa);
    EXPECT_TRUE(dora.modules[0].dora());
  }
}

// FLUX.1's text encoders take the same kinds: a LoKr module on CLIP-L's q_proj merges there.
TEST(LoraKinds, TextEncoderModulesMergeToo) {
  const std::string k = "lora_te1_text_model_encoder_layers_0_self_attn_q_proj.";
  const Tensor w1 = random_normal({2, 2}, DType::F32, 1), w2 = random_normal({3, 4}, DType::F32, 2);
  const LoraFile f = parse_lora({{k + "lokr_w1", w1}, {k + "lokr_w2", w2}}, {}, "mem");
  TensorStore store;
  const Tensor w = random_normal({6, 8}, DType::F32, 3);
  store.add("encoder.layers.0.self_attn.q_proj.weight", w);
  const std::vector<LoraDelta> d = lora_deltas(f, LoraComponent::ClipText, 0.5f, linear_shapes_of(store));
  ASSERT_EQ(d.size(), 1u);
  const Tensor got = merge_lora_deltas(store, d).get("encoder.layers.0.self_attn.q_proj.weight");
  expect_close(
      got,
      [&](int64_t i, int64_t j) { return at(w, i, j) + 0.5 * at(w1, i / 3, j / 4) * at(w2, i % 3, j % 4); },
      "CLIP q_proj");
  EXPECT_TRUE(lora_deltas(f, LoraComponent::T5Text, 1.0f, linear_shapes_of(store)).empty());
}

// A layer whose source weight was released (synthetic benchmark weights keep a stride-0 stand-in)
// has nothing to merge a per-request copy from: refused, never merged into zeros.
TEST(LoraAttachment, ReleasedSourceIsRefused) {
  TensorStore store;
  store.add("img_in.weight", random_normal({4, 6}, DType::F32, 1));
  std::map<std::string, nn::Linear> linears{
      {"img_in.weight", nn::Linear::prepare(store.get("img_in.weight"))}};
  linears["img_in.weight"].release_source();
  const LoraFile f = parse_lora({{"img_in.lokr_w1", random_normal({2, 2}, DType::F32, 2)},
                                 {"img_in.lokr_w2", random_normal({2, 3}, DType::F32, 3)}},
                                {}, "mem");
  const std::vector<LoraDelta> deltas = lora_deltas(f, flux2_lora_scheme(), 1.0f, linear_shapes_of(store));
  ErrorCode code = ErrorCode::Internal;
  try {
    LoraAttachment attach(linears, deltas, DType::F32, Device::cpu());
  } catch (const Error& e) {
    code = e.code();
  }
  EXPECT_EQ(code, ErrorCode::Unsupported);
  EXPECT_FALSE(linears["img_in.weight"].replaced());
}

// Malformed modules: one line naming the file and the key.
TEST(LoraLycorisRejects, OneLineNamingTheKey) {
  const Tensor m2x3 = random_normal({2, 3}, DType::F32, 1), m3x2 = random_normal({3, 2}, DType::F32, 2);
  const Tensor m4x4 = random_normal({4, 4}, DType::F32, 3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::string k = "lora_unet_img_in";
  const std::vector<std::pair<std::map<std::string, Tensor>, std::string>> cases = {
      {{{k + ".lokr_w1", m2x3}}, "needs lokr_w2"},
      {{{k + ".lokr_w1", m2x3}, {k + ".lokr_w2_a", m2x3}}, "lokr_w2_b"},
      {{{k + ".lokr_w1_a", m2x3}, {k + ".lokr_w1_b", m2x3}, {k + ".lokr_w2", m2x3}}, "do not multiply"},
      {{{k + ".lokr_w1", m2x3}, {k + ".lokr_w1_a", m2x3}, {k + ".lokr_w1_b", m3x2}, {k + ".lokr_w2", m2x3}},
       "exactly one"},
      {{{k + ".hada_w1_a", m2x3}, {k + ".hada_w1_b", m3x2}, {k + ".hada_w2_a", m2x3}}, "hada_w2_b"},
      {{{k + ".hada_w1_a", m2x3},
        {k + ".hada_w1_b", m3x2},
        {k + ".hada_w2_a", m4x4},
        {k + ".hada_w2_b", m4x4}},
       "not the same shape"},
      {{{k + ".lokr_w1", m2x3}, {k + ".lokr_w2", m2x3}, {k + ".alpha", scalar(nan)}}, "not a number"},
      {{{k + ".lokr_w1", m2x3}, {k + ".lokr_w2", m2x3}, {k + ".lokr_t2", m4x4}}, "Tucker core"},
      {{{k + ".lora_down.weight", m2x3}, {k + ".lora_up.weight", m3x2}, {k + ".lokr_w1", m2x3}}, "mixes"},
      {{{k + ".lora_down.weight", m2x3}, {k + ".lora_up.weight", m3x2}, {k + ".dora_scale", m4x4}},
       "DoRA magnitude"},
      {{{k + ".dora_scale", m4x4}}, "only a DoRA magnitude"},
  };
  for (const auto& [tensors, want] : cases) {
    std::string e;
    try {
      parse_lora(tensors, {}, "bad.safetensors");
    } catch (const Error& err) {
      e = err.what();
    }
    EXPECT_NE(e.find(want), std::string::npos) << want << ": " << e;
    EXPECT_NE(e.find("bad.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find("img_in"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // A LoKr delta that does not fit its layer names the kind and both shapes.
  TensorStore store;
  store.add("img_in.weight", random_normal({4, 6}, DType::F32, 4));
  const LoraFile f = parse_lora({{k + ".lokr_w1", m2x3}, {k + ".lokr_w2", m2x3}}, {}, "bad.safetensors");
  std::string e;
  try {
    lora_deltas(f, flux2_lora_scheme(), 1.0f, linear_shapes_of(store));
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("lokr delta [4, 9]"), std::string::npos) << e;
  EXPECT_NE(e.find("img_in.weight [4, 6]"), std::string::npos) << e;
}

}  // namespace
}  // namespace fluxrt::models
