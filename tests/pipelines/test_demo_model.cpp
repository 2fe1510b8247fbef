// The bundled demo model (models/demo, built by tools/demo_model/) through the C++ pipeline,
// against images diffusers' Flux2KleinPipeline rendered for the same prompts, seeds and settings
// (tools/demo_model/dump_reference_images.py -> tests/data/demo_model/): f32 every pixel within
// 2/255, bf16 SSIM >= 0.98. A few steps at 64x64 keep this in the default suite; whether the
// pictures are right is test_demo_model_quality_slow.cpp's job.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "backend/cpu/onednn_util.h"
#include "core/strict_kernels.h"
#include "io/image.h"
#include "io/public_image.h"
#include "pipelines/demo_model_classifier.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "support/image_compare.h"

namespace fs = std::filesystem;
using namespace fluxrt;

namespace {

const fs::path kModel = fs::path(FLUXRT_TEST_DATA_DIR) / ".." / ".." / "models" / "demo";
const fs::path kReferences = fs::path(FLUXRT_TEST_DATA_DIR) / "demo_model";

struct Case {
  const char* name;
  const char* prompt;
  uint64_t seed;
  int steps;
  float guidance;
  int max_sequence_length;
  // star_top_left was chaotic in bf16 on the first bundled model (diffusers' own bf16 image reached
  // only SSIM 0.79 against its f32 image), so it is checked in f32 only.
  bool check_bf16 = true;
};

// Mirror of CASES in tools/demo_model/dump_reference_images.py (cases.json records the same).
constexpr Case kCases[] = {
    {"red_circle", "a red circle on a blue background", 1, 4, 4.0f, 512},
    {"star_top_left", "a small yellow star at the top left on a black background", 7, 4, 4.0f, 512, false},
    {"short_text", "a large green square on the right on a white background", 3, 3, 4.0f, 64},
};

std::unique_ptr<pipelines::Flux2KleinPipeline> load(DType dtype) {
  pipelines::PipelineOptions options;
  options.dtype = dtype;
  options.load_vae_encoder = false;
  return pipelines::Flux2KleinPipeline::load(kModel, options);
}

io::Image render(pipelines::Flux2KleinPipeline& pipe, const Case& c) {
  fluxrt::GenerateRequest request;
  request.prompts = {c.prompt};
  request.seed = c.seed;
  request.width = 64;
  request.height = 64;
  request.steps = c.steps;
  request.guidance = c.guidance;
  request.max_sequence_length = c.max_sequence_length;
  auto result = pipe.generate(request);
  EXPECT_TRUE(result.used_cfg);
  return result.images.at(0);
}

io::Image reference(const Case& c, const std::string& dtype) {
  return io::to_rgb(io::read_png((kReferences / (std::string(c.name) + "_" + dtype + ".png")).string()));
}

}  // namespace

TEST(DemoModel, FolderDescribesABaseModelWithGuidance) {
  auto pipe = load(DType::F32);
  const auto& defaults = pipe->defaults();
  EXPECT_FALSE(defaults.is_distilled);  // trained with caption dropout for classifier-free guidance
  EXPECT_GT(defaults.guidance_scale, 1.0f);
  // 6 heads x 32 (hidden 192), bf16 weights: one 128-wide head scored 40/100; four heads x 32 at
  // hidden 128 82/100 after three joint rounds; hidden 192 87/100 after one run of 7000 steps
  EXPECT_EQ(pipe->transformer_config().heads * pipe->transformer_config().head_dim, 192);
  EXPECT_EQ(pipe->transformer_config().heads, 6);
  EXPECT_EQ(pipe->transformer_config().in_channels, 128);
}

// The whole pipeline (text encoder, transformer, VAE decode and, for the reference image, encode)
// at 128x128 in both dtypes under strict kernels: no op takes a composed fallback and oneDNN makes
// no primitive on its reference implementation (which a fixed weight layout once let in on AMX
// CPUs at 256x256 and larger, conv_cpu.cpp). Shape-only checks at the real models' sizes are in
// test_conv_kernel_choice and test_linear_kernel_choice.
TEST(DemoModel, RunsOnJitKernelsOnlyUnderStrictMode) {
  const bool was = strict_kernels();
  set_strict_kernels(true);
  const int before = backend::onednn::reference_primitive_count();
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    pipelines::PipelineOptions options;
    options.dtype = dtype;
    auto pipe = pipelines::Flux2KleinPipeline::load(kModel, options);
    fluxrt::GenerateRequest request;
    request.prompts = {"a red circle on a blue background"};
    request.seed = 5;
    request.width = 128;
    request.height = 128;
    request.steps = 1;
    request.guidance = 4.0f;
    io::Image ref;
    ref.width = ref.height = 64;
    ref.channels = 3;
    ref.pixels.assign(64 * 64 * 3, 128);
    request.reference_images = {io::to_public(ref)};
    EXPECT_NO_THROW({
      const auto result = pipe->generate(request);
      EXPECT_EQ(result.images.at(0).width, 128);
    });
  }
  EXPECT_EQ(backend::onednn::reference_primitive_count(), before);
  set_strict_kernels(was);
}

TEST(DemoModel, F32MatchesDiffusersWithinTwoLevels) {
  auto pipe = load(DType::F32);
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.name);
    const auto diff = test::compare_images(render(*pipe, c), reference(c, "f32"));
    EXPECT_LE(diff.max_abs, 2) << diff.str();
  }
}

TEST(DemoModel, Bf16MatchesDiffusersSsim) {
  // docs/numerics.md: SSIM >= 0.98, except where diffusers' own bf16 image is already farther from
  // its f32 image (a small model trained for an hour amplifies bf16 rounding over the steps): then
  // 1.5x that reference error, 1 - SSIM.
  auto pipe = load(DType::BF16);
  for (const auto& c : kCases) {
    if (!c.check_bf16) continue;
    SCOPED_TRACE(c.name);
    const auto expected = reference(c, "bf16");
    const double own = test::compare_images(expected, reference(c, "f32")).ssim;
    const double bound = std::min(0.98, 1.0 - 1.5 * (1.0 - own));
    const auto diff = test::compare_images(render(*pipe, c), expected);
    EXPECT_GE(diff.ssim, bound) << diff.str() << "; diffusers' own bf16-vs-f32 SSIM " << own;
  }
}

TEST(DemoModelClassifier, MatchesThePythonClassifierOnTheReferenceImages) {
  std::ifstream in(kReferences / "classifications.txt");
  ASSERT_TRUE(in) << "missing classifications.txt";
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string file, background, shape_colour;
    int horizontal = 0, vertical = 0, pixels = 0;
    ASSERT_TRUE(fields >> file >> background >> shape_colour >> horizontal >> vertical >> pixels) << line;
    SCOPED_TRACE(file);
    const auto got = test::demo::classify(io::to_rgb(io::read_png((kReferences / file).string())));
    EXPECT_EQ(got.background, background) << got.str();
    EXPECT_EQ(got.shape_colour.empty() ? "none" : got.shape_colour, shape_colour) << got.str();
    EXPECT_EQ(got.shape_pixels, pixels) << got.str();
    if (!got.shape_colour.empty()) {
      EXPECT_EQ(got.horizontal, horizontal) << got.str();
      EXPECT_EQ(got.vertical, vertical) << got.str();
    }
    ++checked;
  }
  EXPECT_GE(checked, 6);
}

TEST(DemoModelClassifier, ReadsADrawnDisc) {
  // Pink background, a black disc of radius 6 around (16, 46): left, bottom.
  io::Image image{64, 64, 3, std::vector<uint8_t>(64 * 64 * 3)};
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 64; ++x) {
      const bool disc = (x - 16) * (x - 16) + (y - 46) * (y - 46) <= 36;
      const uint8_t rgb[3] = {uint8_t(disc ? 20 : 250), uint8_t(disc ? 20 : 140), uint8_t(disc ? 20 : 200)};
      for (int c = 0; c < 3; ++c) image.pixels[(y * 64 + x) * 3 + c] = rgb[c];
    }
  }
  const auto got = test::demo::classify(image);
  EXPECT_EQ(got.background, "pink");
  EXPECT_EQ(got.shape_colour, "black");
  EXPECT_EQ(got.horizontal, -1);
  EXPECT_EQ(got.vertical, 1);
  EXPECT_EQ(got.shape_pixels, 113);  // lattice points with x^2 + y^2 <= 36
}
