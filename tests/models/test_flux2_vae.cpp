// FLUX.2 VAE against diffusers dumps (tools/reference/dump_flux2_vae.py): tiny random
// AutoencoderKLFlux2 in both key layouts, decoder/encoder in f32 and bf16, uint8 post-processing,
// tiled vs untiled.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/allocator.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "models/vae/flux2_vae.h"
#include "support/compare.h"
#include "support/thread_count.h"
#include "support/vae_tiling.h"

namespace fluxrt::models {
namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(FLUXRT_TEST_DATA_DIR) / "flux2_vae";
const char* kSizes[] = {"64x64", "48x80"};

const io::Checkpoint& reference() {
  static const io::Checkpoint ckpt = io::Checkpoint::open((kDir / "reference.safetensors").string());
  return ckpt;
}
Tensor golden(const std::string& name) { return reference().tensor(name); }

Flux2VaeOptions opts(DType dtype, TilingMode mode = TilingMode::Never) {
  Flux2VaeOptions o;
  o.dtype = dtype;
  o.tiling.mode = mode;
  return o;
}

double rel_l2(const Tensor& a, const Tensor& b) { return test::compare(a.to(DType::F32), b.to(DType::F32)).rel_l2; }

TEST(Flux2Vae, ConfigFromDiffusersFolder) {
  const auto c = Flux2VaeConfig::from_json_file((kDir / "model" / "config.json").string());
  EXPECT_EQ(c.block_out_channels, (std::vector<int>{8, 16, 16, 16}));
  EXPECT_EQ(c.latent_channels, 32);
  EXPECT_EQ(c.norm_num_groups, 4);
  EXPECT_FLOAT_EQ(c.batch_norm_eps, 1e-4f);
  EXPECT_EQ(c.packed_channels(), 128);
  EXPECT_EQ(c.spatial_factor(), 8);
  EXPECT_THROW(Flux2VaeConfig::from_json_text("{\"patch_size\": [1, 1]}"), Error);
}

TEST(Flux2Vae, DecoderMatchesDiffusersF32) {
  const Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), opts(DType::F32));
  for (const char* s : kSizes) {
    SCOPED_TRACE(s);
    Tensor img = vae.decode_latents(golden(std::string("dec_in_") + s));
    EXPECT_EQ(img.dtype(), DType::F32);
    EXPECT_TRUE(test::all_close(img, golden(std::string("dec_out_") + s), test::TolClass::ModuleGolden));
  }
}

TEST(Flux2Vae, EncoderMatchesDiffusersF32) {
  const Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), opts(DType::F32));
  for (const char* s : kSizes) {
    SCOPED_TRACE(s);
    const Tensor x = golden(std::string("enc_in_") + s);
    EXPECT_TRUE(test::all_close(vae.encode_mode(x), golden(std::string("enc_mode_") + s), test::TolClass::ModuleGolden));
    EXPECT_TRUE(test::all_close(vae.encode_latents(x), golden(std::string("enc_out_") + s), test::TolClass::ModuleGolden));
  }
}

TEST(Flux2Vae, BflLayoutGivesTheSameModel) {
  const auto config = Flux2VaeConfig::from_json_file((kDir / "model" / "config.json").string());
  const Flux2Vae vae = Flux2Vae::load((kDir / "ae_bfl.safetensors").string(), opts(DType::F32), config);
  const Tensor img = vae.decode_latents(golden("dec_in_48x80"));
  EXPECT_TRUE(test::all_close(img, golden("dec_out_48x80"), test::TolClass::ModuleGolden));
  EXPECT_TRUE(test::all_close(vae.encode_latents(golden("enc_in_64x64")), golden("enc_out_64x64"), test::TolClass::ModuleGolden));
}

// bf16: the module-golden row of docs/numerics.md (rel-L2 <= 2e-2) against the f32 reference,
// widened where diffusers itself, running this VAE in bf16 (vae.to(torch.bfloat16), the
// pipeline's dtype), is further off: then we may be at most 1.5x as far as diffusers' bf16 run
// (the "reference runs in lower precision" clause). The random tiny weights amplify rounding
// (diffusers bf16 vs f32 is ~2.2e-2 on the decoder here), so the decoder uses that clause.
TEST(Flux2Vae, DecoderAndEncoderBf16WithinModuleTolerance) {
  const Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), opts(DType::BF16));
  const auto tol = test::tolerance_for(test::TolClass::ModuleGolden, DType::BF16);
  for (const char* s : kSizes) {
    SCOPED_TRACE(s);
    const std::string t = s;
    const Tensor img = vae.decode_latents(golden("dec_in_" + t));
    const Tensor enc = vae.encode_latents(golden("enc_in_" + t));
    EXPECT_EQ(img.dtype(), DType::BF16);
    const double dec_ours = rel_l2(img, golden("dec_out_" + t)), enc_ours = rel_l2(enc, golden("enc_out_" + t));
    const double dec_diff = rel_l2(golden("dec_out_bf16_" + t), golden("dec_out_" + t));
    const double enc_diff = rel_l2(golden("enc_out_bf16_" + t), golden("enc_out_" + t));
    std::printf("[bf16 %s] rel-L2 vs f32 reference: decode %.4g (diffusers bf16 %.4g), encode %.4g (diffusers bf16 %.4g); "
                "vs diffusers bf16: decode %.4g, encode %.4g\n",
                s, dec_ours, dec_diff, enc_ours, enc_diff, rel_l2(img, golden("dec_out_bf16_" + t)),
                rel_l2(enc, golden("enc_out_bf16_" + t)));
    EXPECT_LE(dec_ours, std::max(tol.bound, 1.5 * dec_diff));
    EXPECT_LE(enc_ours, std::max(tol.bound, 1.5 * enc_diff));
  }
}

TEST(Flux2Vae, PostprocessMatchesVaeImageProcessor) {
  for (const char* s : kSizes) {
    SCOPED_TRACE(s);
    const Tensor expected = golden(std::string("dec_u8_") + s);
    // On diffusers' own decoder output the rounding is bit exact.
    const Tensor u8 = postprocess_to_uint8(golden(std::string("dec_out_") + s));
    ASSERT_EQ(u8.shape(), expected.shape());
    EXPECT_TRUE(test::all_close(u8, expected, test::TolClass::Exact));
  }
  // Half-way and out-of-range values: -1 -> 0, 1 -> 255, 2 -> 255, 0.5 -> (0.75 * 255 = 191.25) 191.
  const Tensor x = Tensor::from_vector({-1.f, 1.f, 2.f, 0.5f, -3.f, 0.f}, {1, 1, 2, 3}, DType::F32);
  const auto v = postprocess_to_uint8(x).to_vector();
  EXPECT_EQ(v, (std::vector<float>{0, 255, 255, 191, 0, 128}));
}

TEST(Flux2Vae, PostprocessOfOurDecodeWithinOneLevel) {
  const Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), opts(DType::F32));
  const auto a = postprocess_to_uint8(vae.decode_latents(golden("dec_in_64x64"))).to_vector();
  const auto b = golden("dec_u8_64x64").to_vector();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_LE(std::fabs(a[i] - b[i]), 1.0f) << i;
}

// Tiled vs untiled on 256x256 and 256x208 (208 is not a multiple of the 128-pixel tile) with
// 32 pixels of overlap, forced. The mid block (its attention over all pixels) and the levels whose
// whole-image tensors are no wider than a tile's run once on the whole image, here decode: mid +
// up levels 0-2 (only the full-resolution level per tile), encode: down levels 2-3 + mid (levels 0-1
// per tile). What remains is the tiled levels' GroupNorm statistics (per tile, not per image) and
// their limited context at tile borders (zero padding inside the image, blended over 32 px); the
// tiny random VAE is far less local than a trained one. Measured 0.123 / 0.092 (decode) and
// 0.045 / 0.047 (encode); before the whole-image stages every stage ran per tile: 0.33 / 0.18,
// and diffusers' own tiling of this model at 256x256 with 128-pixel tiles is 0.44 / 0.24.
// A throwaway run with the tiled levels' GroupNorms given the untiled pass's statistics gave
// decode 0.011 / 0.012 and encode 0.036 / 0.032: the decode's remaining difference is mostly the
// per-tile statistics, the encode's mostly border context (the encoder's receptive field is far
// wider than 32 px).
// With one tile covering the image the result is the untiled pass exactly.
TEST(Flux2Vae, TiledDecodeAndEncodeMatchUntiled) {
  Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), opts(DType::F32));
  const TilingOptions forced = test::forced_tiles(128, 32);
  uint64_t state = 12345;
  auto uniform = [&]() {  // LCG, [-1, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 40) * 0x1.0p-24 * 2.0 - 1.0);
  };
  for (int w : {256, 208}) {
    SCOPED_TRACE(w);
    const int h = 256;
    std::vector<float> zv(size_t{128} * (h / 16) * (w / 16)), xv(size_t{3} * h * w);
    for (auto& v : zv) v = 1.7f * uniform();  // ~unit variance
    for (auto& v : xv) v = uniform();
    const Tensor z = Tensor::from_vector(zv, {1, 128, h / 16, w / 16});
    const Tensor x = Tensor::from_vector(xv, {1, 3, h, w});
    vae.set_tiling(TilingOptions{TilingMode::Never});
    const Tensor dec_full = vae.decode_latents(z), enc_full = vae.encode_mode(x);
    vae.set_tiling(forced);
    EXPECT_TRUE(vae.decode_would_tile(1, h, w));
    EXPECT_TRUE(vae.encode_would_tile(1, h, w));
    // Tiles flush with the far edge: 256 px -> 3 tiles, 208 px -> 2 (the last one overlapping more).
    const TilePlan dp = vae.decode_tile_plan(1, h, w), ep = vae.encode_tile_plan(1, h, w);
    EXPECT_EQ(dp.rows, 3);
    EXPECT_EQ(dp.cols, w == 256 ? 3 : 2);
    EXPECT_EQ(ep.rows, 3);
    EXPECT_EQ(ep.cols, w == 256 ? 3 : 2);
    EXPECT_EQ(dp.tile_width, 128);
    EXPECT_EQ(dp.whole_image_stages, 4);  // mid block + up levels 0, 1, 2
    EXPECT_EQ(ep.whole_image_stages, 3);  // mid block + down levels 3, 2
    const Tensor dec_tiled = vae.decode_latents(z), enc_tiled = vae.encode_mode(x);
    ASSERT_EQ(dec_tiled.shape(), dec_full.shape());
    ASSERT_EQ(enc_tiled.shape(), enc_full.shape());
    const double dr = rel_l2(dec_tiled, dec_full), er = rel_l2(enc_tiled, enc_full);
    std::printf("[tiling 256x%d] decode rel-L2 %.3g, encode rel-L2 %.3g\n", w, dr, er);
    EXPECT_LT(dr, 0.15);
    EXPECT_LT(er, 0.06);
    // A tile that covers the whole image is the untiled pass.
    vae.set_tiling(test::forced_tiles(256, 32));
    EXPECT_FALSE(vae.encode_would_tile(1, h, w));
    EXPECT_TRUE(test::all_close(vae.decode_latents(z), dec_full, test::TolClass::Exact));
    EXPECT_TRUE(test::all_close(vae.encode_mode(x), enc_full, test::TolClass::Exact));
  }
}

// The tiled path keeps memory bounded: no tensor of the full image size at a layer's channel
// count, only the 3-channel (decode) or latent (encode) f32 accumulator. Measured with the tensor
// allocator's high-water mark on the tiny VAE, where the untiled decode's widest tensors are 16
// channels at the full 256x256.
TEST(Flux2Vae, TiledPassesUseLessPeakMemoryThanUntiled) {
  Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), opts(DType::F32));
  const Tensor z = Tensor::full({1, 128, 16, 16}, DType::F32, 0.3);
  const Tensor x = Tensor::full({1, 3, 256, 256}, DType::F32, 0.1);
  auto peak_of = [&](const TilingOptions& t, bool decode) {
    vae.set_tiling(t);
    reset_host_bytes_peak();
    const size_t base = host_bytes_in_use();
    if (decode) (void)vae.decode_latents(z);
    else (void)vae.encode_mode(x);
    return host_bytes_peak() - base;
  };
  const TilingOptions tiled = test::forced_tiles(64, 16);
  for (bool decode : {true, false}) {
    SCOPED_TRACE(decode ? "decode" : "encode");
    const size_t full = peak_of(TilingOptions{TilingMode::Never}, decode);
    const size_t tiles = peak_of(tiled, decode);
    std::printf("[peak tensor bytes %s] untiled %zu, 64-px tiles %zu\n", decode ? "decode" : "encode", full, tiles);
    EXPECT_LT(static_cast<double>(tiles), 0.4 * static_cast<double>(full));
  }
}

// The lean exact pass (TilingMode::Lean) is the untiled computation with banded convolutions and
// early releases: it must give the untiled result to f32 rounding, with 7-row bands on a 128x176
// image (7 divides no level's height, so every band seam, the image borders and a short last band
// are exercised, in the plain, upsampling and stride-2 convolutions). Auto picks it when only its
// estimate fits the budget. Memory: the tensor allocator's high-water mark, bounded by the lean
// estimate, and no more than the untiled pass's — the allocator's own counter, which repeats
// exactly from run to run and under sanitizers, and which also counts any layout copies the
// convolutions make (conv_cpu.cpp takes them from the tensor allocator). With NCHW activations
// those copies made the lean pass far leaner (lean/untiled 0.50-0.62 on AVX-512); the CPU now
// runs the VAE channels-last, where the convolutions copy nothing, and the two are close (1.00
// decode, 0.89 encode at this size). The process's resident peak (which also sees oneDNN's scratch,
// malloc arenas and, under ASan, shadow memory and quarantine) is compared in the slow
// real-shapes test (test_flux2_vae_lean_slow), not here. On one thread: quicker on a shared box.
TEST(Flux2Vae, LeanPassMatchesUntiledWithBoundedMemory) {
  const test::RestoreThreadCount one_thread(1);
  uint64_t state = 777;
  auto uniform = [&]() {  // LCG, [-1, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 40) * 0x1.0p-24 * 2.0 - 1.0);
  };
  const TilingOptions lean = test::lean_bands(7);
  for (DType dtype : {DType::F32, DType::BF16}) {
    Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), opts(dtype));
    {
      const int h = 128, w = 176;
      std::vector<float> zv(size_t{128} * (h / 16) * (w / 16)), xv(size_t{3} * h * w);
      for (auto& v : zv) v = 1.7f * uniform();
      for (auto& v : xv) v = uniform();
      const Tensor z = Tensor::from_vector(zv, {1, 128, h / 16, w / 16});
      const Tensor x = Tensor::from_vector(xv, {1, 3, h, w});
      // Peak tensor bytes of one pass above what was held before it.
      auto peak_of = [&](const TilingOptions& t, bool decode, Tensor& out) {
        vae.set_tiling(t);
        out = Tensor();
        reset_host_bytes_peak();
        const size_t base = host_bytes_in_use();
        out = decode ? vae.decode_latents(z) : vae.encode_mode(x);
        return host_bytes_peak() - base;
      };
      for (bool decode : {true, false}) {
        SCOPED_TRACE(decode ? "decode" : "encode");
        Tensor full, banded;
        const size_t full_peak = peak_of(TilingOptions{TilingMode::Never}, decode, full);
        const size_t lean_peak = peak_of(lean, decode, banded);
        const TilePlan plan = decode ? vae.decode_tile_plan(1, h, w) : vae.encode_tile_plan(1, h, w);
        EXPECT_TRUE(plan.lean);
        EXPECT_FALSE(plan.tiled);
        ASSERT_EQ(banded.shape(), full.shape());
        const double r = rel_l2(banded, full);
        const double ratio = static_cast<double>(lean_peak) / static_cast<double>(full_peak);
        std::printf("[lean %s %dx%d %s] rel-L2 vs untiled %.3g; peak tensor bytes untiled %zu, lean %zu (ratio %.2f); "
                    "estimates lean %zu, untiled %zu\n",
                    std::string(dtype_name(dtype)).c_str(), h, w, decode ? "decode" : "encode", r, full_peak, lean_peak,
                    ratio, plan.lean_estimate_bytes, plan.estimate_bytes);
        // Never more than the plain pass. (Far less where the backend's convolutions copy their input
        // and output into another layout; the CPU runs the VAE channels-last, which needs no copies.)
        EXPECT_LE(lean_peak, full_peak);
        if (dtype == DType::F32) EXPECT_LE(r, 1e-5);
        else EXPECT_LE(r, 1e-2);  // bf16 roundings at the same places: differences only from oneDNN's per-shape kernels
        EXPECT_LE(lean_peak, plan.lean_estimate_bytes);  // the estimate bounds what was measured
        EXPECT_LT(plan.lean_estimate_bytes, plan.estimate_bytes);
        // Auto with a budget between the two estimates runs the lean pass, and blended tiles below that.
        TilingOptions autot = test::auto_tiles(plan.lean_estimate_bytes, 128, 32);
        autot.band_rows = lean.band_rows;  // the bands the lean estimate above was made for
        vae.set_tiling(autot);
        const TilePlan chosen = decode ? vae.decode_tile_plan(1, h, w) : vae.encode_tile_plan(1, h, w);
        EXPECT_TRUE(chosen.lean);
        EXPECT_FALSE(chosen.tiled);
        autot.memory_budget_bytes = plan.lean_estimate_bytes - 1;
        vae.set_tiling(autot);
        EXPECT_TRUE(decode ? vae.decode_would_tile(1, h, w) : vae.encode_would_tile(1, h, w));
      }
    }
  }
  // Bands sized by kLeanBandBytes (one band here) are the plain pass's convolutions exactly.
  Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), opts(DType::F32));
  const Tensor z = golden("dec_in_48x80");
  const Tensor plain = vae.decode_latents(z);
  vae.set_tiling(TilingOptions{TilingMode::Lean});
  EXPECT_TRUE(test::all_close(vae.decode_latents(z), plain, test::TolClass::Exact));
  EXPECT_TRUE(test::all_close(vae.decode_latents(z), golden("dec_out_48x80"), test::TolClass::ModuleGolden));
}

// Batch elements are tiled independently: a tiled batch of two is each image tiled alone.
TEST(Flux2Vae, TiledBatchMatchesTiledImages) {
  Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), opts(DType::F32));
  vae.set_tiling(test::forced_tiles(64, 16));
  std::vector<float> zv(size_t{2} * 128 * 6 * 5);
  for (size_t i = 0; i < zv.size(); ++i) zv[i] = std::sin(0.37f * static_cast<float>(i));
  const Tensor z = Tensor::from_vector(zv, {2, 128, 6, 5});  // 96x80 images: 2x2 tiles
  const Tensor both = vae.decode_latents(z);
  for (int64_t b = 0; b < 2; ++b) {
    const Tensor one = vae.decode_latents(z.slice(0, b, b + 1).contiguous());
    EXPECT_LT(rel_l2(both.slice(0, b, b + 1).contiguous(), one), 1e-6) << b;
  }
  const Tensor x = both.contiguous();  // two 96x80 images
  const Tensor enc = vae.encode_mode(x);
  for (int64_t b = 0; b < 2; ++b) {
    const Tensor one = vae.encode_mode(x.slice(0, b, b + 1).contiguous());
    EXPECT_LT(rel_l2(enc.slice(0, b, b + 1).contiguous(), one), 1e-6) << b;
  }
}

// With no budget given, Auto compares the estimates with half of MemAvailable, read per pass.
TEST(Flux2Vae, AutoTilingBudgetComesFromAvailableMemory) {
  Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), opts(DType::F32));
  TilingOptions t;  // Auto, memory_budget_bytes 0
  vae.set_tiling(t);
  const size_t budget = vae_auto_memory_budget_bytes();
  EXPECT_GT(budget, size_t{0});
  const TilePlan small = vae.decode_tile_plan(1, 1024, 1024);
  EXPECT_GT(small.budget_bytes, budget / 2);  // read again; the machine may be busy meanwhile
  EXPECT_LT(small.budget_bytes, budget * 2);
  // Plain pass when its estimate fits, else the lean exact pass when its estimate fits, else tiles.
  const bool plain_fits = small.estimate_bytes <= small.budget_bytes;
  const bool lean_fits = small.lean_estimate_bytes <= small.budget_bytes;
  EXPECT_EQ(small.lean, !plain_fits && lean_fits);
  EXPECT_EQ(small.tiled, !plain_fits && !lean_fits);
  // 65536 x 65536 needs terabytes untiled: tiled on any machine, 171 x 171 tiles of 512 px.
  const TilePlan huge = vae.decode_tile_plan(1, 65536, 65536);
  EXPECT_GT(huge.estimate_bytes, huge.budget_bytes);
  EXPECT_TRUE(huge.tiled);
  EXPECT_EQ(huge.rows, 171);
  EXPECT_EQ(huge.tile_height, 512);
  EXPECT_TRUE(vae.encode_tile_plan(1, 65536, 65536).tiled);
  EXPECT_FALSE(vae.decode_tile_plan(1, 512, 512).tiled);  // one tile covers the image
}

TEST(Flux2Vae, AutoTilingFollowsTheMemoryBudget) {
  Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), opts(DType::F32));
  TilingOptions t = test::auto_tiles(size_t{1} << 40, 32, 16);
  vae.set_tiling(t);
  EXPECT_FALSE(vae.decode_would_tile(1, 64, 64));
  t.memory_budget_bytes = 1024;
  vae.set_tiling(t);
  EXPECT_TRUE(vae.decode_would_tile(1, 64, 64));
  EXPECT_TRUE(vae.encode_would_tile(1, 64, 64));
}

TEST(Flux2Vae, MissingTensorIsOneFormatError) {
  const io::Checkpoint ckpt = io::Checkpoint::open((kDir / "model").string());
  TensorStore store = TensorStore::from_checkpoint(ckpt);
  store.remove("decoder.conv_in.bias");
  const auto config = Flux2VaeConfig::from_json_file((kDir / "model" / "config.json").string());
  try {
    (void)Flux2Vae::from_store(store, config, opts(DType::F32));
    FAIL() << "a VAE without decoder.conv_in.bias loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder.conv_in.bias"), std::string::npos) << e.what();
  }
}

TEST(Flux2Vae, DecoderOnlyLoadIgnoresTheEncoder) {
  Flux2VaeOptions o = opts(DType::F32);
  o.load_encoder = false;
  const Flux2Vae vae = Flux2Vae::load((kDir / "model").string(), o);
  EXPECT_FALSE(vae.has_encoder());
  EXPECT_THROW((void)vae.encode_mode(golden("enc_in_64x64")), Error);
  EXPECT_TRUE(test::all_close(vae.decode_latents(golden("dec_in_64x64")), golden("dec_out_64x64"), test::TolClass::ModuleGolden));
}

// Synthetic weights of the real klein shapes bind (every tensor, no leftovers) and count 84,046,115
// parameters (flux-reference.md 4.1).
TEST(Flux2Vae, SyntheticWeightsHaveTheRealShapes) {
  const Flux2VaeConfig config;
  const TensorStore store = make_synthetic_flux2_vae(config, DType::BF16, 1);
  int64_t params = 0;
  for (const auto& n : store.names())
    if (n.rfind("bn.", 0) != 0) params += store.get(n).numel();
  EXPECT_EQ(params, 84046115);  // nn.Module parameters; the BatchNorm statistics are buffers
  const Flux2Vae vae = Flux2Vae::from_store(store, config, opts(DType::BF16));
  EXPECT_GT(vae.decode_flops(1, 1024, 1024), 1e13);
}

// The plans of the real klein VAE with the default 512-px tiles (128 px overlap): at 2048x2048 the
// mid block and up level 0 (decode) / down level 3 (encode) run on the whole 256x256 latent, whose
// widest tensors (512 channels) are no larger than a tile's; the tiled pass's estimate stays far
// under the untiled one. At 4096x4096 the whole latent is wider than a tile, so every stage tiles.
TEST(Flux2Vae, TilePlansOfTheRealShapes) {
  const Flux2VaeConfig config;
  Flux2VaeOptions o = opts(DType::BF16, TilingMode::Always);
  Flux2Vae vae = Flux2Vae::from_store(make_synthetic_flux2_vae(config, DType::BF16, 1), config, o);
  const TilePlan d = vae.decode_tile_plan(1, 2048, 2048), e = vae.encode_tile_plan(1, 2048, 2048);
  std::printf("[2048^2 decode] %dx%d tiles, whole-image stages %d, tiled estimate %.2f GiB (untiled %.2f), %.1f TFLOP "
              "executed (untiled %.1f)\n", d.rows, d.cols, d.whole_image_stages, d.tiled_estimate_bytes / 1073741824.0,
              d.estimate_bytes / 1073741824.0, d.executed_flops * 1e-12, vae.decode_flops(1, 2048, 2048) * 1e-12);
  std::printf("[2048^2 encode] %dx%d tiles, whole-image stages %d, tiled estimate %.2f GiB (untiled %.2f), %.1f TFLOP "
              "executed (untiled %.1f)\n", e.rows, e.cols, e.whole_image_stages, e.tiled_estimate_bytes / 1073741824.0,
              e.estimate_bytes / 1073741824.0, e.executed_flops * 1e-12, vae.encode_flops(1, 2048, 2048) * 1e-12);
  ASSERT_TRUE(d.tiled);
  EXPECT_EQ(d.rows, 5);
  EXPECT_EQ(d.whole_image_stages, 2);  // mid block + up level 0 at 256x256
  EXPECT_EQ(e.whole_image_stages, 2);  // down level 3 + mid block at 256x256
  EXPECT_LT(d.tiled_estimate_bytes, d.estimate_bytes / 8);
  EXPECT_LT(e.tiled_estimate_bytes, e.estimate_bytes / 4);
  // Overlaps are recomputed, the whole-image part once. The mid block's attention over all 65536
  // latent pixels is 8.8 of the 48.5 untiled decode TFLOP (0.9 over 25 tiles of 4096), so the
  // tiled decode executes ~10% more than 25 full tiles would (69.0 vs 62.9 TFLOP).
  EXPECT_GT(d.executed_flops, vae.decode_flops(1, 2048, 2048));
  EXPECT_LT(d.executed_flops, 1.5 * vae.decode_flops(1, 2048, 2048));
  EXPECT_GT(e.executed_flops, vae.encode_flops(1, 2048, 2048));
  EXPECT_LT(e.executed_flops, 1.5 * vae.encode_flops(1, 2048, 2048));
  const TilePlan big = vae.decode_tile_plan(1, 4096, 4096);
  EXPECT_EQ(big.whole_image_stages, 0);
  EXPECT_DOUBLE_EQ(big.executed_flops, big.rows * big.cols * vae.decode_flops(1, 512, 512));
  // What Auto picks on a 24 GiB box (vae_auto_memory_budget_bytes: half of MemAvailable, ~22 GiB
  // there, so an 11 GiB budget): at 2048x2048 the plain pass's estimate (24 GiB decode) does not fit but the
  // lean exact pass's (5.2 GiB decode: a full-resolution resnet's 256-channel input, its normed copy
  // and a 128-channel conv output in bf16, plus the bands; encode 3.2 GiB) does; at 4096x4096 neither
  // does (lean 20.2 / 12.2 GiB), so blended tiles.
  TilingOptions automatic;
  automatic.memory_budget_bytes = size_t{11} << 30;
  vae.set_tiling(automatic);
  for (int64_t size : {2048, 4096}) {
    for (bool decode : {true, false}) {
      const TilePlan a = decode ? vae.decode_tile_plan(1, size, size) : vae.encode_tile_plan(1, size, size);
      std::printf("[auto, 11 GiB budget, %lld^2 %s] %s; estimates: plain %.2f GiB, lean %.2f GiB%s\n",
                  static_cast<long long>(size), decode ? "decode" : "encode",
                  a.tiled ? "blended tiles" : (a.lean ? "lean exact pass" : "plain pass"),
                  a.estimate_bytes / 1073741824.0, a.lean_estimate_bytes / 1073741824.0,
                  a.tiled ? (", " + std::to_string(a.rows) + "x" + std::to_string(a.cols) + " tiles, tiled estimate " +
                             std::to_string(a.tiled_estimate_bytes / 1073741824.0) + " GiB").c_str() : "");
      EXPECT_EQ(a.lean, size == 2048);
      EXPECT_EQ(a.tiled, size == 4096);
    }
  }
  EXPECT_LT(vae.decode_tile_plan(1, 2048, 2048).lean_estimate_bytes, size_t{6} << 30);
  // Untiled: the estimate is the untiled one and the FLOPs are the image's.
  vae.set_tiling(TilingOptions{TilingMode::Never});
  const TilePlan u = vae.decode_tile_plan(1, 2048, 2048);
  EXPECT_FALSE(u.tiled);
  EXPECT_EQ(u.tiled_estimate_bytes, 0u);
  EXPECT_DOUBLE_EQ(u.executed_flops, vae.decode_flops(1, 2048, 2048));
}

}  // namespace
}  // namespace fluxrt::models
