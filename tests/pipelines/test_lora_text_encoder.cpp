// FLUX.1 LoRAs that also adapt the text encoders (issue 25, docs/lora.md) on the tiny FLUX.1-dev
// (tests/data/lora_text_encoder, made by tools/reference/dump_lora_text_encoder.py with diffusers +
// PEFT):
//   kohya_te      CLIP modules only, kohya names (lora_te1_text_model_..., alpha), strengths 1 and 0.5
//   diffusers_te  diffusers' save_lora_weights of a transformer adapter and a CLIP adapter together
//                 (each with its own lora_adapter_metadata entry)
//   kohya_t5      T5 modules only (lora_te3_...), strengths 1 and 0.5; diffusers drops T5 parts, so
//                 the reference is diffusers' pipeline on T5 weights the script merged
// merged at load and per request: f32 within 2/255, bf16 SSIM >= 0.98 (docs/numerics.md); the
// pipeline's own encoders are untouched by a request's LoRA. Refusals: FLUX.2 (no CLIP), a CLIP
// module of the wrong shape, a CLIP layer the encoder lacks.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "pipelines/lora_test_support.h"
#include "support/image_compare.h"
#include "support/random_tensor.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;
using models::LoraSpec;
using test::error_of;
using test::expect_lora_image_matches;
using test::lora_dtype_dir;
using test::lora_request;

const fs::path kData = FLUXRT_TEST_DATA_DIR;
const fs::path kHere = kData / "lora_text_encoder";
const fs::path kFlux1 = kData / "models/flux1-dev-tiny";

std::unique_ptr<Pipeline> load_flux1(DType dtype, std::vector<LoraSpec> loras = {}, bool low_memory = false) {
  PipelineOptions o;
  o.dtype = dtype;
  o.parallel_load = false;
  o.low_memory = low_memory;
  o.loras = std::move(loras);
  return Flux1Pipeline::load(kFlux1, o);
}

LoraSpec spec(const std::string& file, float strength = 1.0f) {
  return {(kHere / (file + ".safetensors")).string(), strength};
}

io::Image reference(const std::string& c, DType dtype) {
  return io::to_rgb(io::read_png((kHere / (c + "_" + lora_dtype_dir(dtype)) / "image_0.png").string()));
}

io::Image base_image(DType dtype) {
  return io::to_rgb(io::read_png(
      (test::kLoraData / ("flux1_base_" + std::string(lora_dtype_dir(dtype))) / "image_0.png").string()));
}

class TextEncoderLora : public ::testing::TestWithParam<DType> {};

TEST_P(TextEncoderLora, MergedAtLoadMatchesDiffusers) {
  const DType dt = GetParam();
  const io::Image kohya = load_flux1(dt, {spec("kohya_te")})->generate(lora_request()).images.at(0);
  expect_lora_image_matches(kohya, reference("kohya_te", dt), dt, "kohya CLIP LoRA merged");
  // The CLIP part alone moves the image well beyond the tolerance: it was not dropped.
  EXPECT_GT(test::compare_images(io::to_rgb(kohya), base_image(dt)).max_abs, 4);
  expect_lora_image_matches(load_flux1(dt, {spec("diffusers_te")})->generate(lora_request()).images.at(0),
                            reference("diffusers_te", dt), dt, "diffusers transformer + CLIP LoRA merged");
}

// Per request: a copy of CLIP with the LoRA for that request; the next request is the base again.
TEST_P(TextEncoderLora, PerRequestMatchesDiffusersAndLeavesTheEncoder) {
  const DType dt = GetParam();
  const auto pipe = load_flux1(dt);
  const GenerateResult base = pipe->generate(lora_request());
  expect_lora_image_matches(pipe->generate(lora_request({spec("kohya_te")})).images.at(0),
                            reference("kohya_te", dt), dt, "kohya CLIP LoRA per request");
  if (dt == DType::F32)
    expect_lora_image_matches(pipe->generate(lora_request({spec("kohya_te", 0.5f)})).images.at(0),
                              reference("kohya_te_half", dt), dt, "kohya CLIP LoRA at 0.5 per request");
  expect_lora_image_matches(pipe->generate(lora_request({spec("diffusers_te")})).images.at(0),
                            reference("diffusers_te", dt), dt,
                            "diffusers transformer + CLIP LoRA per request");
  EXPECT_TRUE(pipe->generate(lora_request()).images.at(0).pixels == base.images.at(0).pixels)
      << "a request's CLIP LoRA changed the pipeline's encoder";
}

// T5 parts: merged at load and per request give the image of the merged T5 weights.
TEST_P(TextEncoderLora, T5PartsMergedAndPerRequest) {
  const DType dt = GetParam();
  const io::Image merged = load_flux1(dt, {spec("kohya_t5")})->generate(lora_request()).images.at(0);
  expect_lora_image_matches(merged, reference("kohya_t5", dt), dt, "kohya T5 LoRA merged");
  if (dt == DType::F32) {  // the T5 part moves the f32 image beyond the tolerance: it was applied
    EXPECT_GT(test::compare_images(io::to_rgb(merged), base_image(dt)).max_abs, 2);
  }
  const auto pipe = load_flux1(dt);
  const GenerateResult base = pipe->generate(lora_request());
  expect_lora_image_matches(pipe->generate(lora_request({spec("kohya_t5", 0.5f)})).images.at(0),
                            reference("kohya_t5_half", dt), dt, "kohya T5 LoRA at 0.5 per request");
  EXPECT_TRUE(pipe->generate(lora_request()).images.at(0).pixels == base.images.at(0).pixels)
      << "a request's T5 LoRA changed the pipeline's encoder";
}

// Low-memory mode makes the encoders per request: with a request's text-encoder LoRAs (and the
// engine's) merged into them, not as a second copy.
TEST_P(TextEncoderLora, LowMemoryPerRequest) {
  const DType dt = GetParam();
  const auto pipe = load_flux1(dt, {}, /*low_memory=*/true);
  expect_lora_image_matches(pipe->generate(lora_request({spec("kohya_te")})).images.at(0),
                            reference("kohya_te", dt), dt, "low-memory kohya CLIP LoRA per request");
  expect_lora_image_matches(pipe->generate(lora_request({spec("kohya_t5", 0.5f)})).images.at(0),
                            reference("kohya_t5_half", dt), dt,
                            "low-memory kohya T5 LoRA at 0.5 per request");
  expect_lora_image_matches(pipe->generate(lora_request()).images.at(0), base_image(dt), dt,
                            "low-memory base after");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TextEncoderLora, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(lora_dtype_dir(i.param));
                         });

TEST(ClipLoraRejects, OnFlux2NamesTheFamily) {
  PipelineOptions o;
  o.dtype = DType::F32;
  o.loras = {spec("kohya_te")};
  ErrorCode code{};
  const std::string e =
      error_of([&] { Flux2KleinPipeline::load(kData / "models/flux2-klein-tiny", o); }, &code);
  EXPECT_EQ(code, ErrorCode::Format) << e;
  EXPECT_NE(e.find("FLUX.1"), std::string::npos) << e;
  EXPECT_NE(e.find("text_encoder.encoder.layers."), std::string::npos) << e;
}

TEST(ClipLoraRejects, WrongShapeNamesTheEncoderAndTensor) {
  const fs::path p =
      test::temp_lora("clip_shape", {{"lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_down.weight",
                                      test::random_normal({4, 768}, DType::F32, 1)},
                                     {"lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_up.weight",
                                      test::random_normal({3072, 4}, DType::F32, 2)}});
  ErrorCode code{};
  const std::string e = error_of([&] { load_flux1(DType::F32, {{p.string(), 1.0f}}); }, &code);
  EXPECT_EQ(code, ErrorCode::Format) << e;
  EXPECT_NE(e.find("CLIP text encoder"), std::string::npos) << e;
  EXPECT_NE(e.find("lora_te1_text_model_encoder_layers_0_mlp_fc1"), std::string::npos) << e;
  // Per request the same, and the pipeline keeps working.
  const auto pipe = load_flux1(DType::F32);
  EXPECT_NE(error_of([&] {
              pipe->generate(lora_request({{p.string(), 1.0f}}));
            }).find("CLIP text encoder"),
            std::string::npos);
  EXPECT_EQ(pipe->generate(lora_request()).images.size(), 1u);
  fs::remove(p);
}

TEST(ClipLoraRejects, UnknownClipLayerIsListed) {
  const fs::path p =
      test::temp_lora("clip_layer", {{"lora_te1_text_model_encoder_layers_7_mlp_fc1.lora_down.weight",
                                      test::random_normal({4, 8}, DType::F32, 1)},
                                     {"lora_te1_text_model_encoder_layers_7_mlp_fc1.lora_up.weight",
                                      test::random_normal({16, 4}, DType::F32, 2)}});
  const std::string e = error_of([&] { load_flux1(DType::F32, {{p.string(), 1.0f}}); });
  EXPECT_NE(e.find("match no layer of this CLIP text encoder"), std::string::npos) << e;
  EXPECT_NE(e.find("layers_7_mlp_fc1"), std::string::npos) << e;
  fs::remove(p);
}

}  // namespace
}  // namespace fluxrt::pipelines
