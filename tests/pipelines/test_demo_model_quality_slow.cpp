// Does the C++ pipeline on the bundled demo model (models/demo) draw what it is asked? Ten prompts
// whose shape/background colour pairs were held out of training (the first ten of
// tools/demo_model/evaluate.py, same seeds), rendered at the model's default steps and guidance
// with the default 512-token padding, checked by the pixel classifier that evaluate.py uses
// (demo_model_classifier.h). Slow: 10 images x 50 steps x 2 CFG forwards.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "pipelines/demo_model_classifier.h"
#include "pipelines/klein/flux2_klein_pipeline.h"

namespace fs = std::filesystem;
using namespace fluxrt;

namespace {

const fs::path kModel = fs::path(FLUXRT_TEST_DATA_DIR) / ".." / ".." / "models" / "demo";

struct Prompt {
  const char* text;
  const char* shape_colour;
  const char* background;
  int horizontal, vertical;
};

// evaluate.evaluation_prompts(10) (held-out pairs), seeds 0..9.
constexpr Prompt kPrompts[] = {
    {"a large red diamond at the bottom on an orange background", "red", "orange", 0, 1},
    {"a large blue diamond at the bottom right on a black background", "blue", "black", 1, 1},
    {"a small yellow cross on the right on a purple background", "yellow", "purple", 1, 0},
    {"a large orange diamond at the top on a blue background", "orange", "blue", 0, -1},
    {"a small purple diamond on a gray background", "purple", "gray", 0, 0},
    {"a small white star at the top left on a yellow background", "white", "yellow", -1, -1},
    {"a small black square on a red background", "black", "red", 0, 0},
    {"a large gray star on a white background", "gray", "white", 0, 0},
    {"a red circle at the bottom right on an orange background", "red", "orange", 1, 1},
    {"a large blue cross at the bottom left on a black background", "blue", "black", -1, 1},
};

}  // namespace

TEST(DemoModelQuality, DrawsAtLeastEightOfTenHeldOutPrompts) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype == DType::F32 ? "f32" : "bf16");
    pipelines::PipelineOptions options;
    options.dtype = dtype;
    options.load_vae_encoder = false;
    auto pipe = pipelines::Flux2KleinPipeline::load(kModel, options);
    int agree = 0, seed = 0;
    for (const auto& p : kPrompts) {
      fluxrt::GenerateRequest request;
      request.prompts = {p.text};
      request.seed = static_cast<uint64_t>(seed++);
      request.width = 64;
      request.height = 64;
      const auto result = pipe->generate(request);
      const auto got = test::demo::classify(result.images.at(0));
      const bool ok = got.background == p.background && got.shape_colour == p.shape_colour &&
                      got.horizontal == p.horizontal && got.vertical == p.vertical;
      agree += ok;
      std::printf("%s  %s: %s\n", ok ? "PASS" : "FAIL", p.text, got.str().c_str());
    }
    EXPECT_GE(agree, 8) << agree << " of 10 agree with their caption";
  }
}
