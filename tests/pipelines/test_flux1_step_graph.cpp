// Recorded denoising steps for FLUX.1 (PipelineOptions::cuda_graphs) on the placement-check device
// cpu:1, where ops::DeviceGraph's stand-in re-runs the recorded step at each replay: the graphed
// run must give the direct run's images and final latents bit for bit — dev (guidance
// projection as a request input) and schnell, true CFG (two forwards), img2img (a later first
// step), and a graph kept across requests whose guidance, prompt and position ids change.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/threads.h"
#include "io/public_image.h"
#include "ops/device_graph.h"
#include "pipeline_test_support.h"
#include "pipelines/flux1/flux1_pipeline.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;

const bool kSingleThreaded = [] {
  set_num_threads(1);
  return true;
}();

const fs::path kModels = fs::path(FLUXRT_TEST_DATA_DIR) / "models";

GenerateRequest request(uint64_t seed, int steps) {
  GenerateRequest r;
  r.prompts = {"a small test"};
  r.width = 32;
  r.height = 48;
  r.steps = steps;
  r.max_sequence_length = 16;
  r.seed = seed;
  return r;
}

const Device kCheck = Device::placement_check();

TEST(Flux1StepGraph, DevAndSchnellReplayEveryStepAfterTheFirst) {
  for (DType dtype : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dtype));
    EXPECT_EQ(test::expect_graphs_change_nothing<Flux1Pipeline>(kModels / "flux1-dev-tiny", kCheck, dtype,
                                                                request(3, 4))
                  .graph_steps,
              3);
  }
  EXPECT_EQ(test::expect_graphs_change_nothing<Flux1Pipeline>(kModels / "flux1-schnell-tiny", kCheck,
                                                              DType::BF16, request(4, 3))
                .graph_steps,
            2);
}

TEST(Flux1StepGraph, TrueCfgReplaysBothForwards) {
  GenerateRequest r = request(5, 3);
  r.negative_prompt = "blurry";
  r.true_cfg = 2.0f;
  const GenerateResult g =
      test::expect_graphs_change_nothing<Flux1Pipeline>(kModels / "flux1-dev-tiny", kCheck, DType::F32, r);
  EXPECT_TRUE(g.used_cfg);
  EXPECT_EQ(g.graph_steps, 2);
}

TEST(Flux1StepGraph, Img2ImgStartsLaterAndStillReplays) {
  GenerateRequest r = request(6, 6);
  io::Image init{32, 48, 3, std::vector<uint8_t>(32 * 48 * 3)};
  for (size_t i = 0; i < init.pixels.size(); ++i) init.pixels[i] = static_cast<uint8_t>((i * 29) % 253);
  r.init_image = io::to_public(init);
  r.strength = 0.5f;
  const GenerateResult g =
      test::expect_graphs_change_nothing<Flux1Pipeline>(kModels / "flux1-dev-tiny", kCheck, DType::BF16, r);
  EXPECT_EQ(g.num_steps, 3);
  EXPECT_EQ(g.graph_steps, 2);
}

// The resident transformer keeps the graph: the second request (other prompt, seed and guidance
// scale; 48x32 instead of 32x48, so the same key with other position ids) replays every step.
TEST(Flux1StepGraph, KeptGraphReplaysEveryStepOfTheNextRequest) {
  const fs::path model = kModels / "flux1-dev-tiny";
  auto direct = Flux1Pipeline::load(model, test::options_on(kCheck, DType::BF16));
  auto graphed = Flux1Pipeline::load(model, test::options_on(kCheck, DType::BF16, true));
  GenerateRequest first = request(7, 3), second = request(8, 3);
  second.prompts = {"another prompt"};
  second.guidance = 5.0f;
  second.width = 48;
  second.height = 32;
  const GenerateResult a = graphed->generate(first);
  EXPECT_EQ(a.graph_steps, 2);
  test::expect_same_generation(direct->generate(first), a);
  test::StepDownloads downloads;
  CallContext call;
  downloads.attach(call);
  const GenerateResult b = graphed->generate(second, call);
  EXPECT_EQ(b.graph_steps, 3);
  downloads.expect_none_between_steps();
  test::expect_same_generation(direct->generate(second), b);
}

}  // namespace
}  // namespace fluxrt::pipelines
