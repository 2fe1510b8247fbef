// FLUX.1 dev / schnell transformer vs diffusers' FluxTransformer2DModel (goldens from
// tools/reference/dump_flux1_transformer.py): the diffusers folder (sharded by diffusers), the BFL
// single file, fp8 single files with and without scale tensors, in f32 and bf16; the conditioning
// vector (guidance rounded as the reference rounds it); the name map, config detection, fp8
// dequantisation rules and binding errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/flux/flux1_config.h"
#include "models/flux/flux1_names.h"
#include "models/flux/flux1_transformer.h"
#include "models/flux/flux2_transformer.h"
#include "models/fp8_weights.h"
#include "models/synthetic_weights.h"
#include "support/compare.h"

namespace fluxrt::models {
namespace {

const std::string kData = std::string(FLUXRT_TEST_DATA_DIR) + "/flux1_transformer";
const std::string kDevFolder = kData + "/dev";
const std::string kDevBfl = kData + "/flux1-dev-bfl.safetensors";
const std::string kDevFp8 = kData + "/flux1-dev-fp8.safetensors";
const std::string kSchnell2Fp8Scaled = kData + "/flux1-schnell2-fp8-scaled.safetensors";

struct Case {
  Tensor x, x_ids, ctx, ctx_ids, pooled, t, g, out, out_bf16, vec, vec_bf16;
};

Case load_case(const std::string& name) {
  const io::Checkpoint c = io::Checkpoint::open(kData + "/" + name + ".safetensors");
  auto get = [&](const char* n) { return c.contains(n) ? c.tensor(n).clone() : Tensor(); };
  return {get("x"), get("x_ids"), get("ctx"),      get("ctx_ids"), get("pooled"),  get("t"),
          get("g"), get("out"),   get("out_bf16"), get("vec"),     get("vec_bf16")};
}

Tensor run(const Flux1Transformer& model, const Case& c) {
  return model.forward(c.x, c.x_ids, c.ctx, c.ctx_ids, c.pooled, c.t, c.g);
}

// docs/numerics.md module goldens: f32 rel-L2 <= 1e-5 (cosine >= 0.9999); bf16 rel-L2 <= 2e-2, or
// 1.5x diffusers' own bf16-vs-f32 error where the tiny random model is worse conditioned than that
// (the dev cases: the bf16 reference feeds guidance 3504 for 3.5, which alone moves the output).
void expect_matches(const Tensor& y, const Case& c, DType dtype, const std::string& what) {
  ASSERT_EQ(y.shape(), c.out.shape()) << what;
  EXPECT_EQ(y.dtype(), dtype) << what;
  const Tensor yf = y.to(DType::F32);
  const auto stats = test::compare(yf, c.out);
  std::printf("%s %s: rel-L2 vs diffusers f32 %.3e (cos %.8f)", what.c_str(), std::string(dtype_name(dtype)).c_str(),
              stats.rel_l2, stats.cosine);
  if (dtype == DType::F32) {
    std::printf("\n");
    EXPECT_TRUE(test::all_close(yf, c.out, test::TolClass::ModuleGolden)) << what;
    return;
  }
  const double ref_own = test::compare(c.out_bf16, c.out).rel_l2;
  const double vs_bf16 = test::compare(yf, c.out_bf16).rel_l2;
  std::printf(", vs diffusers bf16 %.3e (diffusers bf16 vs f32 %.3e)\n", vs_bf16, ref_own);
  const double bound = test::tolerance_for(test::TolClass::ModuleGolden, DType::BF16).bound;
  EXPECT_LE(stats.rel_l2, std::max(bound, 1.5 * ref_own)) << what;
  EXPECT_LE(vs_bf16, bound) << what;
}

struct GoldenParam {
  std::string path;
  std::string case_name;
  DType dtype;
};

void PrintTo(const GoldenParam& p, std::ostream* os) {
  *os << p.path << " " << p.case_name << " " << dtype_name(p.dtype);
}

class Flux1Golden : public ::testing::TestWithParam<GoldenParam> {};

TEST_P(Flux1Golden, MatchesDiffusers) {
  const GoldenParam& p = GetParam();
  Flux1LoadOptions opt;
  opt.dtype = p.dtype;
  const auto model = Flux1Transformer::load(p.path, opt);
  const Case c = load_case(p.case_name);
  expect_matches(run(*model, c), c, p.dtype, p.path + " " + p.case_name);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Flux1Golden,
    ::testing::Values(GoldenParam{kDevFolder, "dev", DType::F32}, GoldenParam{kDevFolder, "dev", DType::BF16},
                      GoldenParam{kDevBfl, "dev", DType::F32}, GoldenParam{kDevBfl, "dev", DType::BF16},
                      GoldenParam{kDevFp8, "dev_fp8", DType::F32}, GoldenParam{kDevFp8, "dev_fp8", DType::BF16},
                      GoldenParam{kSchnell2Fp8Scaled, "schnell2_fp8_scaled", DType::F32},
                      GoldenParam{kSchnell2Fp8Scaled, "schnell2_fp8_scaled", DType::BF16}),
    [](const auto& info) {
      const GoldenParam& p = info.param;
      std::string layout = p.path == kDevFolder ? "DiffusersSharded"
                           : p.path == kDevBfl  ? "Bfl"
                           : p.path == kDevFp8  ? "BflFp8"
                                                : "BflFp8Scaled";
      return layout + "_" + p.case_name + "_" + (p.dtype == DType::F32 ? "F32" : "BF16");
    });

// Schnell = the dev weights without guidance_in (the reference ran FluxTransformer2DModel with
// guidance_embeds false on them): detected from the weights in both layouts.
TEST(Flux1Transformer, SchnellWithoutGuidanceInBothLayouts) {
  const Case c = load_case("schnell");
  for (const std::string& path : {kDevBfl, kDevFolder}) {
    const io::Checkpoint ckpt = io::Checkpoint::open(path);
    const TensorStore all = TensorStore::from_checkpoint(ckpt);
    TensorStore raw;
    raw.set_description(path + " without guidance");
    for (const auto& n : all.names())
      if (n.find("guidance") == std::string::npos) raw.add(n, all.get(n));
    ASSERT_LT(raw.size(), all.size());
    const Flux1Config config = flux1_config_detect(flux1_to_canonical(raw));
    EXPECT_FALSE(config.guidance);
    for (DType dtype : {DType::F32, DType::BF16}) {
      Flux1LoadOptions opt;
      opt.dtype = dtype;
      const auto model = Flux1Transformer::from_store(raw, config, opt);
      expect_matches(run(*model, c), c, dtype, path + " schnell");
    }
  }
}

TEST(Flux1Transformer, ConditioningVectorRoundsGuidanceLikeTheReference) {
  // In bf16 diffusers feeds bf16(bf16(3.5) * 1000) = 3504 (flux-reference.md 2.4); feeding 3500
  // changes the high-frequency sinusoid channels completely, so vec_bf16 pins the rounding.
  const Case c = load_case("dev");
  for (DType dtype : {DType::F32, DType::BF16}) {
    Flux1LoadOptions opt;
    opt.dtype = dtype;
    const auto model = Flux1Transformer::load(kDevBfl, opt);
    const Tensor vec = model->conditioning(c.t, c.g, c.pooled).to(DType::F32);
    const Tensor& ref = dtype == DType::F32 ? c.vec : c.vec_bf16;
    const double rel = test::compare(vec, ref).rel_l2;
    std::printf("conditioning %s: rel-L2 %.3e\n", std::string(dtype_name(dtype)).c_str(), rel);
    EXPECT_LE(rel, dtype == DType::F32 ? 1e-5 : 1e-2);
  }
  // The rounding is what the bf16 reference did: its vector differs from the f32 one by far more.
  EXPECT_GT(test::compare(c.vec_bf16, c.vec).rel_l2, 3e-2);
}

TEST(Flux1Names, BothLayoutsGiveTheSameCanonicalTensors) {
  const io::Checkpoint folder = io::Checkpoint::open(kDevFolder);
  const io::Checkpoint bfl = io::Checkpoint::open(kDevBfl);
  const TensorStore a_raw = TensorStore::from_checkpoint(folder);
  const TensorStore b_raw = TensorStore::from_checkpoint(bfl);
  EXPECT_EQ(flux1_detect_layout(a_raw), Flux1Layout::Diffusers);
  EXPECT_EQ(flux1_detect_layout(b_raw), Flux1Layout::Bfl);
  const TensorStore a = flux1_to_canonical(a_raw);
  const TensorStore b = flux1_to_canonical(b_raw);
  ASSERT_EQ(a.names(), b.names());
  for (const auto& name : a.names()) {
    ASSERT_EQ(a.get(name).shape(), b.get(name).shape()) << name;
    EXPECT_EQ(test::compare(a.get(name).to(DType::F32), b.get(name).to(DType::F32)).max_abs, 0.0) << name;
  }
  // Zero copy: canonical tensors point into the mappings, fused BFL tensors are split as row views.
  EXPECT_EQ(a.get("img_in.weight").raw_data(), a_raw.get("x_embedder.weight").raw_data());
  const Tensor& qkv = b_raw.get("double_blocks.0.txt_attn.qkv.weight");
  const int64_t d = qkv.size(1);
  EXPECT_EQ(b.get("double_blocks.0.txt_attn.k.weight").raw_data(),
            static_cast<const uint8_t*>(qkv.raw_data()) + d * d * 2);
  const Tensor& linear1 = b_raw.get("single_blocks.0.linear1.bias");
  EXPECT_EQ(b.get("single_blocks.0.mlp.bias").raw_data(), static_cast<const uint8_t*>(linear1.raw_data()) + 3 * d * 2);
  // Final layer: BFL (shift, scale) rows vs diffusers (scale, shift) rows.
  EXPECT_EQ(b.get("final_layer.shift.weight").raw_data(), b_raw.get("final_layer.adaLN_modulation.1.weight").raw_data());
  EXPECT_EQ(a.get("final_layer.scale.bias").raw_data(), a_raw.get("norm_out.linear.bias").raw_data());
  // The inverse map rebuilds the BFL file exactly.
  const TensorStore back = flux1_canonical_to_bfl(b);
  ASSERT_EQ(back.names(), b_raw.names());
  for (const auto& name : back.names())
    EXPECT_EQ(test::compare(back.get(name).to(DType::F32), b_raw.get(name).to(DType::F32)).max_abs, 0.0) << name;
}

TEST(Flux1Names, Fp8ScalesUnderBothNamesAndPerRow) {
  // The scaled file uses ComfyUI's `.scale_weight`; the same tensors under `.weight_scale`
  // (compressed-tensors) dequantise identically.
  const io::Checkpoint ckpt = io::Checkpoint::open(kSchnell2Fp8Scaled);
  const TensorStore raw = TensorStore::from_checkpoint(ckpt);
  ASSERT_TRUE(raw.contains("img_in.scale_weight"));
  ASSERT_TRUE(raw.contains("scaled_fp8"));
  TensorStore renamed;
  for (const auto& n : raw.names()) {
    const std::string key = ".scale_weight";
    const bool is_scale = n.size() > key.size() && n.compare(n.size() - key.size(), key.size(), key) == 0;
    renamed.add(is_scale ? n.substr(0, n.size() - key.size()) + ".weight_scale" : n, raw.get(n));
  }
  const TensorStore a = fp8_weights_quantized(raw), b = fp8_weights_quantized(renamed);
  ASSERT_EQ(a.names(), b.names());
  EXPECT_FALSE(a.contains("scaled_fp8"));
  EXPECT_EQ(a.get("img_in.weight").dtype(), DType::BF16);
  for (const auto& n : a.names())
    EXPECT_EQ(test::compare(a.get(n).to(DType::F32), b.get(n).to(DType::F32)).max_abs, 0.0) << n;

  // Per-row scales; f32(w8) * s rounded once to bf16.
  const Tensor w8 = Tensor::from_vector({1.0f, -2.0f, 0.5f, 3.0f, 0.25f, -448.0f}, {2, 3}).to(DType::F8E4M3);
  TensorStore rows;
  rows.add("layer.weight", w8);
  rows.add("layer.weight_scale", Tensor::from_vector({0.5f, 3.0f}, {2, 1}));
  rows.add("layer.input_scale", Tensor::from_vector({2.0f}, {1}));
  const TensorStore deq = fp8_weights_quantized(rows);
  EXPECT_EQ(deq.names(), std::vector<std::string>{"layer.weight"});
  ASSERT_NE(deq.quantized("layer.weight"), nullptr) << "a 2-D fp8 weight stays in its bytes";
  EXPECT_EQ(deq.quantized("layer.weight")->type, QuantType::F8E4M3);
  const Tensor expect = Tensor::from_vector({0.5f, -1.0f, 0.25f, 9.0f, 0.75f, -1344.0f}, {2, 3});
  EXPECT_EQ(test::compare(deq.get("layer.weight").to(DType::F32), expect).max_abs, 0.0);

  // Block-wise scales are refused with one line naming the tensor.
  TensorStore blocks;
  blocks.add("layer.weight", w8);
  blocks.add("layer.weight_scale", Tensor::from_vector({1, 1, 1, 1}, {2, 2}));
  try {
    fp8_weights_quantized(blocks);
    FAIL() << "block-wise scales accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer.weight_scale"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

// fp8 files stay fp8 in memory: the 2-D weights are their file bytes, about half of bf16.
TEST(Flux1Transformer, Fp8WeightsStayInTheirBytes) {
  Flux1LoadOptions o;
  const auto fp8 = Flux1Transformer::load(kSchnell2Fp8Scaled, o);
  // The same weights read densely (their bf16 dequantization), as the loaders kept them before.
  const TensorStore kept =
      fp8_weights_quantized(TensorStore::from_checkpoint(io::Checkpoint::open(kSchnell2Fp8Scaled)));
  TensorStore dense;
  for (const std::string& name : kept.names()) dense.add(name, kept.get(name));
  const auto bf16 = Flux1Transformer::from_store(dense, fp8->config(), o);
  EXPECT_LT(fp8->weight_bytes(), bf16->weight_bytes() * 6 / 10);
}

TEST(Flux1Names, ComfyPrefixIsStripped) {
  const io::Checkpoint fp8 = io::Checkpoint::open(kDevFp8);
  const TensorStore raw = TensorStore::from_checkpoint(fp8);
  ASSERT_TRUE(raw.contains("model.diffusion_model.img_in.weight"));
  const io::Checkpoint bfl = io::Checkpoint::open(kDevBfl);
  EXPECT_EQ(flux1_to_canonical(fp8_weights_quantized(raw)).names(),
            flux1_to_canonical(TensorStore::from_checkpoint(bfl)).names());
}

TEST(Flux1Config, FromJsonAndDetectionAgree) {
  const Flux1Config j = flux1_config_from_json(kDevFolder + "/config.json");
  const io::Checkpoint bfl = io::Checkpoint::open(kDevBfl);
  const Flux1Config w = flux1_config_detect(flux1_to_canonical(TensorStore::from_checkpoint(bfl)));
  for (const Flux1Config* c : {&j, &w}) {
    EXPECT_EQ(c->hidden, 128);
    EXPECT_EQ(c->heads, 1);
    EXPECT_EQ(c->double_blocks, 1);
    EXPECT_EQ(c->single_blocks, 1);
    EXPECT_EQ(c->context_dim, 64);
    EXPECT_EQ(c->pooled_dim, 32);
    EXPECT_EQ(c->mlp_hidden, 512);
    EXPECT_EQ(c->in_channels, 64);
    EXPECT_EQ(c->out_channels, 64);
    EXPECT_TRUE(c->guidance);
    EXPECT_EQ(c->axes_dim, (std::vector<int64_t>{16, 56, 56}));
    EXPECT_EQ(c->variant, "custom");
  }
  const io::Checkpoint s2 = io::Checkpoint::open(kSchnell2Fp8Scaled);
  const Flux1Config s =
      flux1_config_detect(flux1_to_canonical(fp8_weights_quantized(TensorStore::from_checkpoint(s2))));
  EXPECT_FALSE(s.guidance);
  EXPECT_EQ(s.double_blocks, 2);
  EXPECT_EQ(s.single_blocks, 2);
}

TEST(Flux1Config, PresetsHaveTheReferenceParameterCounts) {
  // flux-reference.md sections 1.1 / 1.2 (computed from the shapes) and section 6 (FLOPs).
  EXPECT_EQ(flux1_preset("flux.1-dev").parameter_count(), 11901408320);
  EXPECT_EQ(flux1_preset("flux.1-schnell").parameter_count(), 11891178560);
  EXPECT_THROW(flux1_preset("flux.1-pro"), Error);
  EXPECT_NEAR(flux1_preset("flux.1-dev").flops_per_forward(4096, 512) / 1e12, 74.38, 0.05);
  EXPECT_NEAR(flux1_preset("flux.1-schnell").flops_per_forward(4096, 256) / 1e12, 69.46, 0.05);
  EXPECT_NEAR(flux1_preset("flux.1-dev").flops_per_forward(1024, 512) / 1e12, 21.50, 0.03);
}

TEST(Flux1Transformer, BindingErrorsListMissingMisshapedAndUnused) {
  const io::Checkpoint bfl = io::Checkpoint::open(kDevBfl);
  const TensorStore raw = TensorStore::from_checkpoint(bfl);
  TensorStore broken;
  broken.set_description("broken.safetensors");
  for (const auto& n : raw.names()) {
    if (n == "single_blocks.0.linear2.bias") continue;  // missing
    if (n == "txt_in.weight") {
      broken.add(n, raw.get(n).narrow(1, 0, 8));  // mis-shaped
      continue;
    }
    broken.add(n, raw.get(n));
  }
  broken.add("double_blocks.0.extra.weight", raw.get("img_in.weight"));  // unused
  const Flux1Config config = flux1_config_from_json(kDevFolder + "/config.json");
  try {
    Flux1Transformer::from_store(broken, config);
    FAIL() << "a broken checkpoint was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("single_blocks.0.linear2.bias"), std::string::npos) << msg;
    EXPECT_NE(msg.find("txt_in.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("double_blocks.0.extra.weight"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // A schnell config on dev weights leaves guidance_in unused; a FLUX.2 checkpoint is named as such.
  Flux1Config schnell = config;
  schnell.guidance = false;
  EXPECT_THROW(Flux1Transformer::from_store(raw, schnell), Error);
  try {
    Flux1Transformer::load(std::string(FLUXRT_TEST_DATA_DIR) + "/models/flux2-klein-tiny-bfl.safetensors");
    FAIL() << "a FLUX.2 checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FLUX.2"), std::string::npos) << e.what();
  }
}

TEST(Flux1Transformer, LoadsPipelineFoldersAndComfyAllInOneFiles) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("flux1_loading_" + std::to_string(::getpid()));
  fs::create_directories(dir / "pipeline");
  // A pipeline folder: the loader descends into transformer/.
  fs::create_directory_symlink(fs::absolute(kDevFolder), dir / "pipeline" / "transformer");
  Flux1LoadOptions opt;
  opt.dtype = DType::F32;
  const Case dev = load_case("dev");
  EXPECT_TRUE(test::all_close(run(*Flux1Transformer::load((dir / "pipeline").string(), opt), dev), dev.out,
                              test::TolClass::ModuleGolden));
  // An all-in-one file: the prefixed fp8 transformer next to text-encoder and VAE tensors.
  const io::Checkpoint fp8 = io::Checkpoint::open(kDevFp8);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& n : fp8.names()) tensors.emplace_back(n, fp8.tensor(n));
  tensors.emplace_back("text_encoders.clip_l.transformer.text_model.final_layer_norm.weight",
                       Tensor::zeros({8}, DType::BF16));
  tensors.emplace_back("vae.decoder.conv_in.weight", Tensor::zeros({4, 4}, DType::BF16));
  const std::string all_in_one = (dir / "flux1-dev-fp8-all-in-one.safetensors").string();
  io::write_safetensors(all_in_one, tensors);
  const Case c = load_case("dev_fp8");
  EXPECT_TRUE(test::all_close(run(*Flux1Transformer::load(all_in_one, opt), c), c.out, test::TolClass::ModuleGolden));
  fs::remove_all(dir);
}

TEST(Flux1Transformer, GuidanceArgumentMustMatchTheVariant) {
  const Case c = load_case("dev");
  Flux1LoadOptions opt;
  opt.dtype = DType::F32;
  const auto dev = Flux1Transformer::load(kDevBfl, opt);
  EXPECT_THROW(dev->forward(c.x, c.x_ids, c.ctx, c.ctx_ids, c.pooled, c.t), Error);  // dev needs guidance
  const auto schnell = Flux1Transformer::load(kSchnell2Fp8Scaled, opt);
  EXPECT_THROW(schnell->forward(c.x, c.x_ids, c.ctx, c.ctx_ids, c.pooled, c.t, c.g), Error);
  EXPECT_THROW(dev->forward(c.x, c.x_ids, c.ctx, c.ctx_ids, c.pooled.narrow(1, 0, 8).contiguous(), c.t, c.g), Error);
}

TEST(Flux1Transformer, BatchRowsAreIndependentAndSyntheticWeightsWork) {
  // Two heads (D = 256), 1 + 1 blocks with synthetic weights (several blocks against a reference:
  // the schnell2 golden): batch element 1 computed alone
  // equals row 1 of a batch-2 run (per-batch timesteps, guidance and pooled vectors routed
  // correctly), and ids given per batch element ([B, L, 3]) equal shared ids.
  Flux1Config c;
  c.hidden = 256, c.heads = 2, c.double_blocks = 1, c.single_blocks = 1, c.context_dim = 32, c.pooled_dim = 16;
  c.mlp_hidden = 1024;
  Flux1LoadOptions opt;
  opt.dtype = DType::F32;
  const auto model = Flux1Transformer::synthetic(c, 7, opt);
  const int64_t li = 12, lt = 5;
  const Tensor x = synthetic_tensor({2, li, 64}, DType::BF16, 1, 1.0f).to(DType::F32);
  const Tensor ctx = synthetic_tensor({2, lt, 32}, DType::BF16, 2, 1.0f).to(DType::F32);
  const Tensor pooled = synthetic_tensor({2, 16}, DType::BF16, 3, 1.0f).to(DType::F32);
  std::vector<float> xi, ti(static_cast<size_t>(lt * 3), 0.0f);
  for (int64_t i = 0; i < li; ++i) xi.insert(xi.end(), {0.0f, float(i / 4), float(i % 4)});
  const Tensor x_ids = Tensor::from_vector(xi, {li, 3});
  const Tensor ctx_ids = Tensor::from_vector(ti, {lt, 3});
  const Tensor t = Tensor::from_vector({0.9f, 0.3f}, {2});
  const Tensor g = Tensor::from_vector({3.5f, 4.0f}, {2});
  const Tensor y = model->forward(x, x_ids, ctx, ctx_ids, pooled, t, g);
  auto row1 = [](const Tensor& v) { return v.narrow(0, 1, 1).contiguous(); };
  const Tensor y1 = model->forward(row1(x), x_ids, row1(ctx), ctx_ids, row1(pooled), row1(t), row1(g));
  EXPECT_LE(test::compare(row1(y), y1).rel_l2, 1e-6);
  const Tensor yb = model->forward(x, x_ids.unsqueeze(0).expand({2, li, 3}).contiguous(), ctx,
                                   ctx_ids.unsqueeze(0).expand({2, lt, 3}).contiguous(), pooled, t, g);
  EXPECT_LE(test::compare(yb, y).rel_l2, 1e-6);
  const Tensor g2 = Tensor::from_vector({3.5f, 1.0f}, {2});
  const Tensor yg = model->forward(x, x_ids, ctx, ctx_ids, pooled, t, g2);
  EXPECT_GT(test::compare(row1(yg), row1(y)).rel_l2, 1e-4);  // the guidance matters
  EXPECT_EQ(test::compare(yg.narrow(0, 0, 1).contiguous(), y.narrow(0, 0, 1).contiguous()).max_abs, 0.0);
}

}  // namespace
}  // namespace fluxrt::models
