// CUDA graphs for the denoising step (PipelineOptions::cuda_graphs) on a real GPU: the
// replayed steps must give the images and final latents of the same pipeline run step by step,
// bit for bit (the graph launches the very kernels the direct run queues), distilled and with CFG
// and a reference image, across requests (a kept graph), and FLUX.1-dev with true CFG. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "../ops/cuda_test_util.h"  // FLUXRT_REQUIRE_GPU
#include "io/public_image.h"
#include "ops/device_graph.h"
#include "ops/elementwise.h"
#include "pipeline_test_support.h"
#include "pipelines/flux1/flux1_pipeline.h"
#include "pipelines/klein/flux2_klein_pipeline.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;
const fs::path kData = FLUXRT_TEST_DATA_DIR;

const Device kGpu = Device::cuda(0);

// A recording belongs to the recording thread only: another thread's work on the same device
// meanwhile (allocations, kernels, a download) runs at once and right, and is not replayed with the
// graph. The recording waits inside its function until the other thread has finished.
TEST(CudaStepGraph, OtherThreadsWorkRunsDuringARecording) {
  FLUXRT_REQUIRE_GPU();
  auto on_gpu = [](std::vector<float> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    Tensor t = Tensor::empty({n}, DType::F32, kGpu);
    t.copy_from(Tensor::from_vector(v, Shape{n}));
    return t;
  };
  const Tensor in = on_gpu({1, 2, 3});
  Tensor out = Tensor::zeros({3}, DType::F32, kGpu);
  const Tensor other_in = on_gpu({5, 6, 7});
  std::vector<float> other_result;
  auto other_work = [&] {
    const Tensor r = ops::mul(ops::add(other_in, other_in), other_in);  // allocates, launches
    other_result = r.to_vector();                                         // downloads (synchronises)
  };
  other_work();  // once outside the recording: first-use costs (kernel loading) out of the way
  out.copy_from(ops::add(ops::mul(in, in), in));
  out.fill(0.0);
  other_result.clear();
  const ops::DeviceGraph graph = ops::DeviceGraph::record(kGpu, [&] {
    std::thread other(other_work);
    other.join();  // the other thread's work completes while this recording is open
    out.copy_from(ops::add(ops::mul(in, in), in));
  });
  EXPECT_EQ(other_result, (std::vector<float>{50, 72, 98}));
  EXPECT_EQ(out.to_vector(), (std::vector<float>{0, 0, 0})) << "recording runs nothing";
  graph.replay();
  EXPECT_EQ(out.to_vector(), (std::vector<float>{2, 6, 12}));
}

TEST(CudaStepGraph, DistilledReplaysMatchDirectBitwise) {
  FLUXRT_REQUIRE_GPU();
  GenerateRequest r;
  r.prompts = {"a red circle", "stripes"};
  r.seed = 7;
  r.width = r.height = 128;
  r.steps = 4;
  r.max_sequence_length = 32;
  for (DType dtype : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const GenerateResult graphed = test::expect_graphs_change_nothing<Flux2KleinPipeline>(
        kData / "models" / "flux2-klein-tiny", kGpu, dtype, r);
    EXPECT_EQ(graphed.graph_steps, 3) << "a recording failed (see the warning above) or was skipped";
  }
}

TEST(CudaStepGraph, CfgAndReferenceImageMatchDirectBitwise) {
  FLUXRT_REQUIRE_GPU();
  GenerateRequest r;
  r.prompts = {"a cat"};
  r.seed = 3;
  r.width = r.height = 64;
  r.steps = 3;
  r.max_sequence_length = 32;
  r.guidance = 4.0f;
  io::Image ref{64, 64, 3, std::vector<uint8_t>(64 * 64 * 3)};
  for (size_t i = 0; i < ref.pixels.size(); ++i) ref.pixels[i] = static_cast<uint8_t>((i * 37) % 251);
  r.reference_images = {io::to_public(ref)};
  const GenerateResult graphed = test::expect_graphs_change_nothing<Flux2KleinPipeline>(
      kData / "models" / "flux2-klein-base-tiny", kGpu, DType::BF16, r);
  EXPECT_TRUE(graphed.used_cfg);
  EXPECT_EQ(graphed.graph_steps, 2);
}

// A kept graph replayed by a later request with another prompt, seed and image orientation (same
// token count, so the same graph; new RoPE tables and embeddings copied in): every step replays.
TEST(CudaStepGraph, KeptGraphReplaysEveryStepOfTheNextRequest) {
  FLUXRT_REQUIRE_GPU();
  const fs::path model = kData / "models" / "flux2-klein-tiny";
  auto direct = Flux2KleinPipeline::load(model, test::options_on(kGpu, DType::BF16));
  auto graphed = Flux2KleinPipeline::load(model, test::options_on(kGpu, DType::BF16, true));
  GenerateRequest r;
  r.max_sequence_length = 32;
  r.steps = 4;
  for (int i = 0; i < 2; ++i) {
    r.prompts = {i == 0 ? "a red circle" : "blue stripes"};
    r.seed = 5 + i;
    r.width = i == 0 ? 128 : 64;
    r.height = i == 0 ? 64 : 128;
    const GenerateResult g = graphed->generate(r);
    EXPECT_EQ(g.graph_steps, i == 0 ? 3 : 4);
    test::expect_same_generation(direct->generate(r), g);
  }
}

// FLUX.1-dev (guidance projection as a request input) with true CFG: both forwards replayed, the
// direct run's bits.
TEST(CudaStepGraph, Flux1DevWithTrueCfgMatchesDirectBitwise) {
  FLUXRT_REQUIRE_GPU();
  const fs::path model = kData / "models" / "flux1-dev-tiny";
  GenerateRequest r;
  r.prompts = {"a small test"};
  r.width = 32;
  r.height = 48;
  r.steps = 3;
  r.max_sequence_length = 16;
  r.seed = 5;
  r.negative_prompt = "blurry";
  r.true_cfg = 2.0f;
  const GenerateResult graphed =
      test::expect_graphs_change_nothing<Flux1Pipeline>(model, kGpu, DType::BF16, r);
  EXPECT_EQ(graphed.graph_steps, 2) << "a recording failed (see the warning above) or was skipped";
}

}  // namespace
}  // namespace fluxrt::pipelines
