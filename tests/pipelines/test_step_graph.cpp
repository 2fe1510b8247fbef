// Recorded denoising steps (PipelineOptions::cuda_graphs, ops::DeviceGraph) without a GPU: on the
// placement-check device cpu:1 the graph stand-in records the step's work and re-runs it at each
// replay, so the pipeline's buffer handling (inputs copied in before a replay, outputs read before
// the next) is checked here; a step that read a stale buffer would change the image. The CUDA
// graph itself is test_cuda_step_graph_gpu's job.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "ops/device_graph.h"
#include "pipeline_test_support.h"
#include "pipelines/flux2_klein_pipeline.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;

const bool kSingleThreaded = [] {
  set_num_threads(1);
  return true;
}();

const fs::path kData = FLUXRT_TEST_DATA_DIR;

PipelineOptions options_on(Device device, DType dtype, bool graphs) {
  PipelineOptions o = test::options_on(device, dtype);
  o.cuda_graphs = graphs;
  return o;
}

GenerateRequest request(uint64_t seed, int steps) {
  GenerateRequest r;
  r.prompts = {"a red circle", "stripes"};
  r.seed = seed;
  r.width = 64;
  r.height = 64;
  r.num_steps = steps;
  r.max_sequence_length = 32;
  return r;
}

// Generates with and without graphs on `device`; returns the graphed result.
GenerateResult expect_graphs_change_nothing(const fs::path& model, Device device, DType dtype, const GenerateRequest& r) {
  const GenerateResult direct = Flux2KleinPipeline::load(model, options_on(device, dtype, false))->generate(r);
  EXPECT_EQ(direct.graph_steps, 0);
  const int64_t replays_before = ops::device_graph_replays();
  const GenerateResult graphed = Flux2KleinPipeline::load(model, options_on(device, dtype, true))->generate(r);
  test::expect_same_generation(direct, graphed);
  EXPECT_EQ(ops::device_graph_replays() - replays_before, graphed.graph_steps);
  return graphed;
}

TEST(StepGraph, RecordsNothingUntilReplayedAndNeedsADevice) {
  int runs = 0;
  const ops::DeviceGraph g = ops::DeviceGraph::record(Device::placement_check(), [&] { ++runs; });
  EXPECT_EQ(runs, 0) << "recording must not run the work";
  g.replay();
  g.replay();
  EXPECT_EQ(runs, 2);
  EXPECT_FALSE(ops::DeviceGraph::available(Device::cpu()));
  EXPECT_TRUE(ops::DeviceGraph::available(Device::placement_check(2)));
  try {
    ops::DeviceGraph::record(Device::cpu(), [] {});
    FAIL() << "recording on plain cpu must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
  EXPECT_THROW(ops::DeviceGraph().replay(), Error);
}

TEST(StepGraph, DistilledStepsAfterTheFirstReplayBitwise) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const GenerateResult r = expect_graphs_change_nothing(kData / "models" / "flux2-klein-tiny",
                                                          Device::placement_check(), dtype, request(7, 4));
    EXPECT_EQ(r.graph_steps, 3) << "every step but the eager first one replays";
  }
}

TEST(StepGraph, CfgWithReferenceImageReplaysBothForwards) {
  GenerateRequest r = request(3, 3);
  r.prompts = {"a cat"};
  r.guidance_scale = 4.0f;
  io::Image ref{64, 64, 3, std::vector<uint8_t>(64 * 64 * 3)};
  for (size_t i = 0; i < ref.pixels.size(); ++i) ref.pixels[i] = static_cast<uint8_t>((i * 37) % 251);
  r.reference_images = {ref};
  const GenerateResult g = expect_graphs_change_nothing(kData / "models" / "flux2-klein-base-tiny",
                                                        Device::placement_check(), DType::F32, r);
  EXPECT_TRUE(g.used_cfg);
  EXPECT_EQ(g.graph_steps, 2);
}

TEST(StepGraph, OneStepAndPlainCpuRunDirectly) {
  const fs::path model = kData / "models" / "flux2-klein-tiny";
  EXPECT_EQ(expect_graphs_change_nothing(model, Device::placement_check(), DType::F32, request(5, 1)).graph_steps, 0);
  EXPECT_EQ(expect_graphs_change_nothing(model, Device::cpu(), DType::F32, request(5, 3)).graph_steps, 0)
      << "plain cpu has no graphs: the option is ignored";
}

TEST(StepGraph, ReplayedStepsMakeNoHostCopy) {
  auto pipe = Flux2KleinPipeline::load(kData / "models" / "flux2-klein-tiny",
                                       options_on(Device::placement_check(), DType::BF16, true));
  GenerateRequest r = request(9, 4);
  test::StepDownloads downloads;
  downloads.attach(r);
  const GenerateResult g = pipe->generate(r);
  EXPECT_EQ(g.graph_steps, 3);
  ASSERT_EQ(downloads.at_step.size(), 4u);
  downloads.expect_none_between_steps();
}

}  // namespace
}  // namespace fluxrt::pipelines
