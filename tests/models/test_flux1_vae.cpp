// FLUX.1 VAE against diffusers dumps (tools/reference/dump_flux1_vae.py): a tiny random
// AutoencoderKL with the FLUX.1 settings in both key layouts, decoder/encoder with the latent
// scaling and shift in f32 and bf16, uint8 post-processing, tiled vs untiled.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/allocator.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "models/vae/flux1_vae.h"
#include "support/compare.h"
#include "support/vae_tiling.h"

namespace fluxrt::models {
namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(FLUXRT_TEST_DATA_DIR) / "flux1_vae";
const char* kSizes[] = {"64x64", "48x80"};

const io::Checkpoint& reference() {
  static const io::Checkpoint ckpt = io::Checkpoint::open((kDir / "reference.safetensors").string());
  return ckpt;
}
Tensor golden(const std::string& name) { return reference().tensor(name); }

Flux1VaeOptions opts(DType dtype, TilingMode mode = TilingMode::Never) {
  Flux1VaeOptions o;
  o.dtype = dtype;
  o.tiling.mode = mode;
  return o;
}

double rel_l2(const Tensor& a, const Tensor& b) { return test::compare(a.to(DType::F32), b.to(DType::F32)).rel_l2; }

TEST(Flux1Vae, ConfigFromDiffusersFolder) {
  const auto c = Flux1VaeConfig::from_json_file((kDir / "model" / "config.json").string());
  EXPECT_EQ(c.block_out_channels, (std::vector<int>{8, 16, 16, 16}));
  EXPECT_EQ(c.latent_channels, 16);
  EXPECT_EQ(c.norm_num_groups, 4);
  EXPECT_FALSE(c.use_quant_conv);
  EXPECT_FALSE(c.use_post_quant_conv);
  EXPECT_FLOAT_EQ(c.scaling_factor, 0.3611f);
  EXPECT_FLOAT_EQ(c.shift_factor, 0.1159f);
  EXPECT_EQ(c.spatial_factor(), 8);
  const Flux1VaeConfig defaults;  // FLUX.1-dev / schnell vae/config.json values
  EXPECT_EQ(defaults.latent_channels, 16);
  EXPECT_EQ(defaults.block_out_channels, (std::vector<int>{128, 256, 512, 512}));
  EXPECT_THROW(Flux1VaeConfig::from_json_text("{\"_class_name\": \"AutoencoderKLFlux2\"}"), Error);
  EXPECT_THROW(Flux1VaeConfig::from_json_text("{\"act_fn\": \"gelu\"}"), Error);
  EXPECT_THROW(Flux1VaeConfig::from_json_text("{\"norm_num_groups\": 7}"), Error);
  EXPECT_THROW(Flux1VaeConfig::from_json_text("{\"scaling_factor\": \"x\"}"), Error);
  EXPECT_THROW(Flux1VaeConfig::from_json_text("not json"), Error);
}

TEST(Flux1Vae, DecoderMatchesDiffusersF32) {
  const Flux1Vae vae = Flux1Vae::load((kDir / "model").string(), opts(DType::F32));
  for (const char* s : kSizes) {
    SCOPED_TRACE(s);
    Tensor img = vae.decode_latents(golden(std::string("dec_in_") + s));
    EXPECT_EQ(img.dtype(), DType::F32);
    EXPECT_TRUE(test::all_close(img, golden(std::string("dec_out_") + s), test::TolClass::ModuleGolden));
    std::printf("[f32 %s] decode rel-L2 %.3g\n", s, rel_l2(img, golden(std::string("dec_out_") + s)));
  }
}

TEST(Flux1Vae, EncoderMatchesDiffusersF32) {
  const Flux1Vae vae = Flux1Vae::load((kDir / "model").string(), opts(DType::F32));
  for (const char* s : kSizes) {
    SCOPED_TRACE(s);
    const Tensor x = golden(std::string("enc_in_") + s);
    const Tensor mode = vae.encode_mode(x), latents = vae.encode_latents(x);
    EXPECT_TRUE(test::all_close(mode, golden(std::string("enc_mode_") + s), test::TolClass::ModuleGolden));
    EXPECT_TRUE(test::all_close(latents, golden(std::string("enc_out_") + s), test::TolClass::ModuleGolden));
    std::printf("[f32 %s] encode rel-L2 %.3g\n", s, rel_l2(latents, golden(std::string("enc_out_") + s)));
  }
}

TEST(Flux1Vae, BflLayoutGivesTheSameModel) {
  // The BFL file has no config: the tiny architecture is given, the scaling comes from the defaults.
  const auto config = Flux1VaeConfig::from_json_file((kDir / "model" / "config.json").string());
  const Flux1Vae vae = Flux1Vae::load((kDir / "ae_bfl.safetensors").string(), opts(DType::F32), config);
  EXPECT_TRUE(test::all_close(vae.decode_latents(golden("dec_in_48x80")), golden("dec_out_48x80"),
                              test::TolClass::ModuleGolden));
  EXPECT_TRUE(test::all_close(vae.encode_latents(golden("enc_in_64x64")), golden("enc_out_64x64"),
                              test::TolClass::ModuleGolden));
}

TEST(Flux1Vae, ScalingRoundTrips) {
  const Flux1Vae vae = Flux1Vae::load((kDir / "model").string(), opts(DType::F32));
  const Tensor z = golden("dec_in_64x64");
  const Tensor unscaled = vae.unscale_latents(z);
  // z / 0.3611 + 0.1159, element by element.
  const auto zv = z.to_vector(), uv = unscaled.to_vector();
  for (size_t i = 0; i < zv.size(); i += 37) EXPECT_NEAR(uv[i], zv[i] / 0.3611f + 0.1159f, 1e-5f * (1 + std::fabs(uv[i])));
  EXPECT_TRUE(test::all_close(vae.scale_latents(unscaled), z, test::TolClass::Elementwise));
}

// bf16: the module-golden row of docs/numerics.md (rel-L2 <= 2e-2) against the f32 reference, or
// at most 1.5x as far as diffusers' own bf16 run where that is further off (numerics.md's rule for
// ill-conditioned tiny models; diffusers' bf16 run of this VAE is 1.9e-2..2.0e-2 from its f32 run).
TEST(Flux1Vae, DecoderAndEncoderBf16WithinModuleTolerance) {
  const Flux1Vae vae = Flux1Vae::load((kDir / "model").string(), opts(DType::BF16));
  const auto tol = test::tolerance_for(test::TolClass::ModuleGolden, DType::BF16);
  for (const char* s : kSizes) {
    SCOPED_TRACE(s);
    const std::string t = s;
    const Tensor img = vae.decode_latents(golden("dec_in_" + t));
    const Tensor enc = vae.encode_latents(golden("enc_in_" + t));
    EXPECT_EQ(img.dtype(), DType::BF16);
    EXPECT_EQ(enc.dtype(), DType::BF16);
    const double dec_ours = rel_l2(img, golden("dec_out_" + t)), enc_ours = rel_l2(enc, golden("enc_out_" + t));
    const double dec_diff = rel_l2(golden("dec_out_bf16_" + t), golden("dec_out_" + t));
    const double enc_diff = rel_l2(golden("enc_out_bf16_" + t), golden("enc_out_" + t));
    std::printf("[bf16 %s] rel-L2 vs f32 reference: decode %.4g (diffusers bf16 %.4g), encode %.4g (diffusers bf16 "
                "%.4g); vs diffusers bf16: decode %.4g, encode %.4g\n",
                s, dec_ours, dec_diff, enc_ours, enc_diff, rel_l2(img, golden("dec_out_bf16_" + t)),
                rel_l2(enc, golden("enc_out_bf16_" + t)));
    EXPECT_LE(dec_ours, std::max(tol.bound, 1.5 * dec_diff));
    EXPECT_LE(enc_ours, std::max(tol.bound, 1.5 * enc_diff));
  }
}

TEST(Flux1Vae, PostprocessMatchesVaeImageProcessor) {
  for (const char* s : kSizes) {
    SCOPED_TRACE(s);
    const Tensor expected = golden(std::string("dec_u8_") + s);
    EXPECT_TRUE(test::all_close(postprocess_to_uint8(golden(std::string("dec_out_") + s)), expected,
                                test::TolClass::Exact));
  }
  const Flux1Vae vae = Flux1Vae::load((kDir / "model").string(), opts(DType::F32));
  const auto a = postprocess_to_uint8(vae.decode_latents(golden("dec_in_64x64"))).to_vector();
  const auto b = golden("dec_u8_64x64").to_vector();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_LE(std::fabs(a[i] - b[i]), 1.0f) << i;
}

// Tiled vs untiled at 256x256 and 256x208 with 128-pixel tiles and 32 pixels of overlap, forced.
// The mid block and the low-resolution levels run on the whole image (TilePlan::whole_image_stages,
// as in the FLUX.2 test); the tiled full-resolution levels' per-tile GroupNorm statistics and
// limited context at tile borders remain, on a tiny random VAE far less local than a trained one.
// Measured decode 0.066 / 0.049, encode 0.043 / 0.056. A tile that covers the image gives the
// untiled pass exactly.
TEST(Flux1Vae, TiledDecodeAndEncodeMatchUntiled) {
  Flux1Vae vae = Flux1Vae::load((kDir / "model").string(), opts(DType::F32));
  const TilingOptions forced = test::forced_tiles(128, 32);
  uint64_t state = 54321;
  auto uniform = [&]() {  // LCG, [-1, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 40) * 0x1.0p-24 * 2.0 - 1.0);
  };
  for (int w : {256, 208}) {
    SCOPED_TRACE(w);
    const int h = 256;
    std::vector<float> zv(size_t{16} * (h / 8) * (w / 8)), xv(size_t{3} * h * w);
    for (auto& v : zv) v = 1.7f * uniform();
    for (auto& v : xv) v = uniform();
    const Tensor z = Tensor::from_vector(zv, {1, 16, h / 8, w / 8});
    const Tensor x = Tensor::from_vector(xv, {1, 3, h, w});
    vae.set_tiling(TilingOptions{TilingMode::Never});
    const Tensor dec_full = vae.decode_latents(z), enc_full = vae.encode_mode(x);
    vae.set_tiling(forced);
    EXPECT_TRUE(vae.core().decode_would_tile(1, h, w));
    const Tensor dec_tiled = vae.decode_latents(z), enc_tiled = vae.encode_mode(x);
    ASSERT_EQ(dec_tiled.shape(), dec_full.shape());
    ASSERT_EQ(enc_tiled.shape(), enc_full.shape());
    const double dr = rel_l2(dec_tiled, dec_full), er = rel_l2(enc_tiled, enc_full);
    std::printf("[tiling 256x%d] decode rel-L2 %.3g, encode rel-L2 %.3g\n", w, dr, er);
    EXPECT_LT(dr, 0.09);
    EXPECT_LT(er, 0.07);
    vae.set_tiling(test::forced_tiles(256, 32));
    EXPECT_TRUE(test::all_close(vae.decode_latents(z), dec_full, test::TolClass::Exact));
  }
}

// The lean exact pass (TilingMode::Lean, see the FLUX.2 test) on the FLUX.1 layout (no quant
// convs, 16 latent channels), batch 2, 5-row bands on 136x120 (5 divides no level's height): the
// untiled result to f32 rounding, with a tracked peak no larger than the untiled pass's and within
// the lean estimate.
TEST(Flux1Vae, LeanPassMatchesUntiled) {
  Flux1Vae vae = Flux1Vae::load((kDir / "model").string(), opts(DType::F32));
  const int64_t B = 2, h = 136, w = 120;
  std::vector<float> zv(static_cast<size_t>(B * 16 * (h / 8) * (w / 8))), xv(static_cast<size_t>(B * 3 * h * w));
  for (size_t i = 0; i < zv.size(); ++i) zv[i] = 1.5f * std::sin(0.61f * static_cast<float>(i));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::cos(0.037f * static_cast<float>(i));
  const Tensor z = Tensor::from_vector(zv, {B, 16, h / 8, w / 8});
  const Tensor x = Tensor::from_vector(xv, {B, 3, h, w});
  const TilingOptions lean = test::lean_bands(5);
  for (bool decode : {true, false}) {
    SCOPED_TRACE(decode ? "decode" : "encode");
    auto run = [&](const TilingOptions& t, size_t& peak) {
      vae.set_tiling(t);
      reset_host_bytes_peak();
      const size_t base = host_bytes_in_use();
      Tensor out = decode ? vae.decode_latents(z) : vae.encode_latents(x);
      peak = host_bytes_peak() - base;
      return out;
    };
    size_t full_peak = 0, lean_peak = 0;
    const Tensor full = run(TilingOptions{TilingMode::Never}, full_peak);
    const Tensor banded = run(lean, lean_peak);
    const TilePlan plan = decode ? vae.core().decode_tile_plan(B, h, w) : vae.core().encode_tile_plan(B, h, w);
    ASSERT_TRUE(plan.lean);
    ASSERT_EQ(banded.shape(), full.shape());
    const double r = rel_l2(banded, full);
    std::printf("[lean %s] rel-L2 vs untiled %.3g, peak tensor bytes untiled %zu, lean %zu, lean estimate %zu\n",
                decode ? "decode" : "encode", r, full_peak, lean_peak, plan.lean_estimate_bytes);
    EXPECT_LE(r, 1e-5);
    EXPECT_LE(lean_peak, full_peak);
    EXPECT_LE(lean_peak, plan.lean_estimate_bytes);
  }
}

TEST(Flux1Vae, BadInputsAndFilesFailWithOneLine) {
  const Flux1Vae vae = Flux1Vae::load((kDir / "model").string(), opts(DType::F32));
  auto expect_error = [](ErrorCode code, const std::function<void()>& body) {
    try {
      body();
      ADD_FAILURE() << "expected fluxrt::Error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  expect_error(ErrorCode::InvalidArgument, [&] { vae.decode_latents(Tensor::zeros({1, 32, 4, 4}, DType::F32)); });
  expect_error(ErrorCode::InvalidArgument, [&] { vae.decode_latents(Tensor::zeros({16, 4, 4}, DType::F32)); });
  expect_error(ErrorCode::InvalidArgument, [&] { vae.encode_latents(Tensor::zeros({1, 3, 20, 16}, DType::F32)); });
  expect_error(ErrorCode::InvalidArgument, [&] { vae.encode_latents(Tensor::zeros({1, 4, 16, 16}, DType::F32)); });
  // A FLUX.2-shaped config on FLUX.1 weights: every mismatch in one Format error.
  const io::Checkpoint ckpt = io::Checkpoint::open((kDir / "model").string());
  TensorStore store = TensorStore::from_checkpoint(ckpt);
  Flux1VaeConfig wrong = Flux1VaeConfig::from_json_file((kDir / "model" / "config.json").string());
  wrong.latent_channels = 32;
  expect_error(ErrorCode::Format, [&] { (void)Flux1Vae::from_store(store, wrong, opts(DType::F32)); });
  store.remove("decoder.conv_in.bias");
  const auto config = Flux1VaeConfig::from_json_file((kDir / "model" / "config.json").string());
  try {
    (void)Flux1Vae::from_store(store, config, opts(DType::F32));
    FAIL() << "a VAE without decoder.conv_in.bias loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder.conv_in.bias"), std::string::npos) << e.what();
  }
  expect_error(ErrorCode::Unsupported, [&] { (void)Flux1Vae::load((kDir / "model").string(), opts(DType::I32)); });
  // The FLUX.2 test VAE has quant convs and BatchNorm tensors FLUX.1 does not use.
  const fs::path flux2 = fs::path(FLUXRT_TEST_DATA_DIR) / "flux2_vae" / "model";
  expect_error(ErrorCode::Format, [&] { (void)Flux1Vae::load(flux2.string(), opts(DType::F32), config); });
}

TEST(Flux1Vae, DecoderOnlyLoadIgnoresTheEncoder) {
  Flux1VaeOptions o = opts(DType::F32);
  o.load_encoder = false;
  const Flux1Vae vae = Flux1Vae::load((kDir / "ae_bfl.safetensors").string(), o,
                                      Flux1VaeConfig::from_json_file((kDir / "model" / "config.json").string()));
  EXPECT_FALSE(vae.has_encoder());
  EXPECT_THROW((void)vae.encode_mode(golden("enc_in_64x64")), Error);
  EXPECT_TRUE(test::all_close(vae.decode_latents(golden("dec_in_64x64")), golden("dec_out_64x64"),
                              test::TolClass::ModuleGolden));
}

// Synthetic weights of the real FLUX.1 shapes bind (every tensor, no leftovers) and count
// 83,819,683 parameters (flux-reference.md 4.1).
TEST(Flux1Vae, SyntheticWeightsHaveTheRealShapes) {
  const Flux1VaeConfig config;
  const TensorStore store = make_synthetic_flux1_vae(config, DType::BF16, 1);
  int64_t params = 0;
  for (const auto& n : store.names()) params += store.get(n).numel();
  EXPECT_EQ(params, 83819683);
  const Flux1Vae vae = Flux1Vae::from_store(store, config, opts(DType::BF16));
  EXPECT_GT(vae.core().decode_flops(1, 1024, 1024), 1e13);
}

}  // namespace
}  // namespace fluxrt::models
