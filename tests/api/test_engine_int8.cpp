// fluxrt::Precision::Int8 (`--dtype int8`): the transformer's linears W8A8, everything else bf16.
// On the tiny klein and FLUX.1 pipelines the image is close to the bf16 engine's and not equal to
// it (int8 ran); the metadata says "int8"; cpu:1 gives cpu's pixels; per-request LoRAs (bf16
// branches beside the int8 base, and LoKr's merged copy prepared in int8) still apply; the weight
// estimate counts the transformer at a byte per weight; a CUDA device is refused at open. The
// bundled demo model's quality is in test_engine_int8_quality_slow.cpp; a short version here.
//
// Bounds: measured on a Zen5 (VNNI, 127-level weights) and on the same machine with
// ONEDNN_MAX_CPU_ISA=AVX2 (63-level weights and oneDNN's AVX2 int8 GEMM, as on CPUs without int8
// units), the worst of the two with margin: tiny pipelines SSIM >= 0.9985, PSNR >= 44.0 dB; the
// demo at 12 steps SSIM >= 0.993, PSNR >= 43.1 dB.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "fluxrt/engine.h"
#include "pipelines/memory_estimate.h"
#include "support/image_compare.h"

namespace fs = std::filesystem;

namespace {

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kKlein = kData / "models" / "flux2-klein-tiny";
const fs::path kDev = kData / "models" / "flux1-dev-tiny";
const fs::path kDemo = kData / ".." / ".." / "models" / "demo";

fluxrt::EngineOptions at(fluxrt::Precision precision, const std::string& device = "cpu") {
  fluxrt::EngineOptions o;
  o.precision = precision;
  o.device = device;
  return o;
}

fluxrt::GenerateRequest small_request(const std::string& prompt, uint64_t seed = 7) {
  fluxrt::GenerateRequest r;
  r.prompts = {prompt};
  r.width = 64;
  r.height = 64;
  r.steps = 4;
  r.seed = seed;
  return r;
}

fluxrt::test::ImageDiff diff(const fluxrt::Image& a, const fluxrt::Image& b) {
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.height, b.height);
  return fluxrt::test::compare_images(a.rgb.data(), b.rgb.data(), a.width, a.height, 3);
}

// `int8` against `bf16`: within (min_ssim, min_psnr) and not the same pixels.
void expect_close_not_equal(const fluxrt::GenerateResult& int8, const fluxrt::GenerateResult& bf16,
                            double min_ssim, double min_psnr, const std::string& what) {
  ASSERT_EQ(int8.images.size(), bf16.images.size());
  for (size_t i = 0; i < int8.images.size(); ++i) {
    const fluxrt::test::ImageDiff d = diff(int8.images[i].image, bf16.images[i].image);
    std::printf("%s, image %zu: int8 vs bf16 %s\n", what.c_str(), i, d.str().c_str());
    EXPECT_GE(d.ssim, min_ssim) << what << ": " << d.str();
    EXPECT_GE(d.psnr, min_psnr) << what << ": " << d.str();
    EXPECT_GT(d.max_abs, 0) << what << ": the int8 linears did not run";
  }
}

}  // namespace

TEST(EngineInt8, KleinCloseToBf16NotEqualAndSaysInt8) {
  fluxrt::Engine bf16(kKlein.string());
  fluxrt::Engine int8(kKlein.string(), at(fluxrt::Precision::Int8));
  EXPECT_EQ(int8.options().precision, fluxrt::Precision::Int8);
  fluxrt::GenerateRequest r = small_request("a red circle");
  r.images_per_prompt = 2;
  const fluxrt::GenerateResult got = int8.generate(r);
  expect_close_not_equal(got, bf16.generate(r), 0.99, 38, "klein");
  EXPECT_EQ(got.images[0].metadata.dtype, "int8");
  EXPECT_EQ(got.timing.dtype, "int8");
  bool said = false;
  for (const auto& [key, value] : fluxrt::metadata_text(got.images[0].metadata))
    said = said || (key == "dtype" && value == "int8");
  EXPECT_TRUE(said) << "the PNG text chunks name the precision";
}

TEST(EngineInt8, Flux1CloseToBf16NotEqual) {
  fluxrt::Engine bf16(kDev.string());
  fluxrt::Engine int8(kDev.string(), at(fluxrt::Precision::Int8));
  fluxrt::GenerateRequest r = small_request("a green field", 5);
  r.true_cfg = 2.0f;
  r.negative_prompt = "blurry";
  expect_close_not_equal(int8.generate(r), bf16.generate(r), 0.99, 38, "flux.1-dev");
}

// cpu:1, the CPU posing as another device (docs/cuda.md), runs the CPU kernels: int8 there too,
// the same pixels as on cpu.
TEST(EngineInt8, PlacementCheckDeviceGivesCpusPixels) {
  const fluxrt::GenerateRequest r = small_request("a red circle", 11);
  const fluxrt::GenerateResult cpu = fluxrt::Engine(kKlein.string(), at(fluxrt::Precision::Int8)).generate(r);
  const fluxrt::GenerateResult cpu1 =
      fluxrt::Engine(kKlein.string(), at(fluxrt::Precision::Int8, "cpu:1")).generate(r);
  EXPECT_TRUE(cpu.images.at(0).image.rgb == cpu1.images.at(0).image.rgb);
  EXPECT_FALSE(cpu.images.at(0).image.rgb ==
               fluxrt::Engine(kKlein.string()).generate(r).images.at(0).image.rgb);
}

// A CUDA device has no int8 linears: refused when the engine opens, in one line, before anything
// loads (a build without CUDA gets the same error: the precision is checked first).
TEST(EngineInt8, RefusedOnCuda) {
  for (const char* device : {"cuda", "cuda:0"}) {
    try {
      fluxrt::Engine engine(kKlein.string(), at(fluxrt::Precision::Int8, device));
      ADD_FAILURE() << device << ": opened at int8";
    } catch (const fluxrt::Error& e) {
      EXPECT_EQ(e.code(), fluxrt::ErrorCode::Unsupported) << e.what();
      const std::string m = e.what();
      EXPECT_NE(m.find("int8"), std::string::npos) << m;
      EXPECT_NE(m.find("CPU"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

// Per-request LoRAs on the int8 transformer: a plain LoRA as bf16 branches beside the int8 base,
// a LoKr module (kohya_mixed) as a merged copy of its layers, prepared in int8 like the layer it
// replaces. Each changes the image, and lands close to what it gives in bf16.
TEST(EngineInt8, PerRequestLorasStillApply) {
  fluxrt::Engine bf16(kKlein.string());
  fluxrt::Engine int8(kKlein.string(), at(fluxrt::Precision::Int8));
  const fluxrt::GenerateRequest plain = small_request("a red circle", 3);
  const fluxrt::Image without = int8.generate(plain).images.at(0).image;
  for (const fs::path& file : {kData / "lora" / "klein" / "peft.safetensors",
                               kData / "lora_lycoris" / "klein" / "kohya_mixed.safetensors"}) {
    fluxrt::GenerateRequest r = plain;
    r.loras = {{file.string(), 1.0f}};
    const fluxrt::GenerateResult got = int8.generate(r);
    EXPECT_FALSE(got.images.at(0).image.rgb == without.rgb) << file << " changed nothing";
    expect_close_not_equal(got, bf16.generate(r), 0.99, 38, file.filename().string());
  }
}

// The weight estimate the RAM check and the low-memory choice use: the transformer's 2-D weights
// at one byte each, the other components as in bf16.
TEST(EngineInt8, WeightEstimateCountsTheTransformerAtAByteAWeight) {
  using fluxrt::pipelines::pipeline_weight_bytes;
  const auto bf16 = pipeline_weight_bytes(kKlein, fluxrt::DType::BF16);
  const auto int8 =
      pipeline_weight_bytes(kKlein, fluxrt::DType::BF16, {}, {}, fluxrt::nn::LinearFormat::Int8);
  EXPECT_EQ(int8.text_encoders, bf16.text_encoders);
  EXPECT_EQ(int8.vae, bf16.vae);
  // Half, plus the 1-D norm scales kept at two bytes.
  EXPECT_GT(int8.transformer, bf16.transformer / 2);
  EXPECT_LT(int8.transformer, bf16.transformer * 6 / 10);
  // A Q8_0 GGUF: its blocks (34 bytes per 32 weights) become 32 bytes.
  const fs::path q8 = kData / "gguf" / "flux2-klein-tiny-q8_0.gguf";
  EXPECT_LT(
      pipeline_weight_bytes(kKlein, fluxrt::DType::BF16, q8, {}, fluxrt::nn::LinearFormat::Int8).transformer,
      pipeline_weight_bytes(kKlein, fluxrt::DType::BF16, q8).transformer);
}

// The bundled demo model (trained weights), three prompts at 64x64, 12 of its 50 steps with CFG:
// a short version of test_engine_int8_quality_slow.cpp's 20 prompts at the defaults.
TEST(EngineInt8, DemoModelCloseToBf16) {
  fluxrt::Engine bf16(kDemo.string());
  fluxrt::Engine int8(kDemo.string(), at(fluxrt::Precision::Int8));
  for (const char* prompt :
       {"a red circle on a blue background",
        "a small green star at the top left on a white "
        "background",
        "a yellow cross on the left and a black ring on the right, on a pink background"}) {
    fluxrt::GenerateRequest r = small_request(prompt, 3);
    r.steps = 12;
    r.guidance = 4.0f;
    expect_close_not_equal(int8.generate(r), bf16.generate(r), 0.98, 38, prompt);
  }
}
