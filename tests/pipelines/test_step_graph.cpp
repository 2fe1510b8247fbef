// Recorded denoising steps (PipelineOptions::cuda_graphs, ops::DeviceGraph) without a GPU: on the
// placement-check device cpu:1 the graph stand-in records the step's work and re-runs it at each
// replay, so the pipeline's buffer handling (inputs copied in before a replay, outputs read before
// the next) is checked here; a step that read a stale buffer would change the image. The CUDA
// graph itself is test_cuda_step_graph_gpu's job. Graphs kept across requests (StepGraphCache) are
// checked the same way, request after request.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "io/public_image.h"
#include "ops/device_graph.h"
#include "ops/elementwise.h"
#include "pipeline_test_support.h"
#include "pipelines/klein/flux2_klein_pipeline.h"
#include "pipelines/step_graph.h"

namespace fluxrt::pipelines {
namespace {

namespace fs = std::filesystem;

const bool kSingleThreaded = [] {
  set_num_threads(1);
  return true;
}();

const fs::path kData = FLUXRT_TEST_DATA_DIR;

using test::options_on;

GenerateRequest request(uint64_t seed, int steps) {
  GenerateRequest r;
  r.prompts = {"a red circle", "stripes"};
  r.seed = seed;
  r.width = 64;
  r.height = 64;
  r.steps = steps;
  r.max_sequence_length = 32;
  return r;
}

using Klein = Flux2KleinPipeline;

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
    const GenerateResult r = test::expect_graphs_change_nothing<Klein>(
        kData / "models" / "flux2-klein-tiny", Device::placement_check(), dtype, request(7, 4));
    EXPECT_EQ(r.graph_steps, 3) << "every step but the eager first one replays";
  }
}

TEST(StepGraph, CfgWithReferenceImageReplaysBothForwards) {
  GenerateRequest r = request(3, 3);
  r.prompts = {"a cat"};
  r.guidance = 4.0f;
  io::Image ref{64, 64, 3, std::vector<uint8_t>(64 * 64 * 3)};
  for (size_t i = 0; i < ref.pixels.size(); ++i) ref.pixels[i] = static_cast<uint8_t>((i * 37) % 251);
  r.reference_images = {io::to_public(ref)};
  const GenerateResult g = test::expect_graphs_change_nothing<Klein>(
      kData / "models" / "flux2-klein-base-tiny", Device::placement_check(), DType::F32, r);
  EXPECT_TRUE(g.used_cfg);
  EXPECT_EQ(g.graph_steps, 2);
}

TEST(StepGraph, OneStepAndPlainCpuRunDirectly) {
  const fs::path model = kData / "models" / "flux2-klein-tiny";
  EXPECT_EQ(
      test::expect_graphs_change_nothing<Klein>(model, Device::placement_check(), DType::F32, request(5, 1))
          .graph_steps,
      0);
  EXPECT_EQ(
      test::expect_graphs_change_nothing<Klein>(model, Device::cpu(), DType::F32, request(5, 3)).graph_steps,
      0)
      << "plain cpu has no graphs: the option is ignored";
}

TEST(StepGraph, ReplayedStepsMakeNoHostCopy) {
  auto pipe = Flux2KleinPipeline::load(kData / "models" / "flux2-klein-tiny",
                                       options_on(Device::placement_check(), DType::BF16, true));
  GenerateRequest r = request(9, 4);
  test::StepDownloads downloads;
  CallContext call;
  downloads.attach(call);
  const GenerateResult g = pipe->generate(r, call);
  EXPECT_EQ(g.graph_steps, 3);
  ASSERT_EQ(downloads.at_step.size(), 4u);
  downloads.expect_none_between_steps();
}

// The resident transformer keeps its step graphs across requests: a later request of a kept shape
// replays every step, with its own prompt, seed and RoPE tables copied into the graph's buffers
// (a stale buffer would reproduce the earlier request's image). 64x32 and 32x64 share a key
// (same token count, different position ids), so the second of them checks the RoPE copy.
TEST(StepGraph, KeptGraphsReplayEveryStepOfALaterRequest) {
  const fs::path model = kData / "models" / "flux2-klein-tiny";
  auto direct = Flux2KleinPipeline::load(model, options_on(Device::placement_check(), DType::BF16, false));
  auto graphed = Flux2KleinPipeline::load(model, options_on(Device::placement_check(), DType::BF16, true));
  struct Case {
    const char* what;
    uint64_t seed;
    std::vector<std::string> prompts;
    int width, height, replayed;
  };
  const Case cases[] = {
      {"first request: one eager step", 7, {"a red circle", "stripes"}, 64, 64, 3},
      {"same shape, other prompts and seed", 8, {"blue square", "a green dot"}, 64, 64, 4},
      {"new shape", 9, {"a", "b"}, 64, 32, 3},
      {"same key, other position ids", 10, {"c", "d"}, 32, 64, 4},
      {"the first shape is still kept", 11, {"e", "f"}, 64, 64, 4},
      {"a third shape evicts the least recent (64x32)", 12, {"g", "h"}, 32, 32, 3},
      {"64x32 records again", 13, {"i", "j"}, 64, 32, 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    GenerateRequest r = request(c.seed, 4);
    r.prompts = c.prompts;
    r.width = c.width;
    r.height = c.height;
    const int64_t replays_before = ops::device_graph_replays();
    const GenerateResult g = graphed->generate(r);
    EXPECT_EQ(g.graph_steps, c.replayed);
    EXPECT_EQ(ops::device_graph_replays() - replays_before, g.graph_steps);
    test::expect_same_generation(direct->generate(r), g);
  }
}

TEST(StepGraph, CfgGraphKeptAcrossRequestsWithNewNegativePrompt) {
  const fs::path model = kData / "models" / "flux2-klein-base-tiny";
  auto direct = Flux2KleinPipeline::load(model, options_on(Device::placement_check(), DType::F32, false));
  auto graphed = Flux2KleinPipeline::load(model, options_on(Device::placement_check(), DType::F32, true));
  for (const char* negative : {"", "blurry"}) {
    SCOPED_TRACE(negative);
    GenerateRequest r = request(3, 3);
    r.prompts = {"a cat"};
    r.guidance = 4.0f;
    r.negative_prompt = negative;
    const GenerateResult g = graphed->generate(r);
    EXPECT_EQ(g.graph_steps, *negative ? 3 : 2);
    test::expect_same_generation(direct->generate(r), g);
  }
}

// A 1-D f32 tensor on the host placement-check device (graphs' stand-in for a GPU).
Tensor on_placement_device(const std::vector<float>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor t = Tensor::empty({n}, DType::F32, Device::placement_check());
  t.copy_from(Tensor::from_vector(v, Shape{n}));
  return t;
}

// StepGraph on its own, with a step of two element-wise ops: eager first call, recorded second,
// replays after; request inputs copied in per request (a stale one would repeat the old result).
TEST(StepGraph, FirstCallEagerThenReplaysOnCopiedInputs) {
  const Device dev = Device::placement_check();
  int calls = 0;
  const std::vector<Tensor> request_a{on_placement_device({1, 2, 3})}, request_b{on_placement_device({10, 20, 30})};
  StepGraph graph(dev, StepGraphKey(request_a, {Shape{3}}),
                  [&](const std::vector<Tensor>& request, const std::vector<Tensor>& step) {
                    ++calls;
                    return std::vector<Tensor>{ops::add(ops::mul(step[0], request[0]), request[0])};
                  });
  auto expect = [](const StepGraph::Outputs& out, bool replayed, std::vector<float> want) {
    EXPECT_EQ(out.replayed, replayed);
    ASSERT_EQ(out.tensors.size(), 1u);
    EXPECT_EQ(out.tensors[0].to_vector(), want);
  };
  graph.begin_request(request_a);
  expect(graph.run({on_placement_device({1, 1, 1})}), false, {2, 4, 6});
  expect(graph.run({on_placement_device({2, 2, 2})}), true, {3, 6, 9});
  expect(graph.run({on_placement_device({0, 1, 2})}), true, {1, 4, 9});
  graph.begin_request(request_b);
  expect(graph.run({on_placement_device({1, 1, 1})}), true, {20, 40, 60});
  EXPECT_EQ(calls, 4) << "one eager call, three replays (recording runs nothing)";
  EXPECT_THROW(graph.run({on_placement_device({1, 1})}), Error) << "a step input of another shape";
}

// A recording that fails for the device (a capture it refused) or for memory (no room for the
// graph's intermediates) leaves the request running its steps directly, same results; any other
// error is the caller's.
TEST(StepGraph, RecordingRefusedOrOutOfMemoryRunsStepsDirectly) {
  const Device dev = Device::placement_check();
  const std::vector<Tensor> request{on_placement_device({1, 2, 3})};
  auto step = [](const std::vector<Tensor>& req, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::add(ops::mul(in[0], req[0]), req[0])};
  };
  for (ErrorCode code : {ErrorCode::Device, ErrorCode::OutOfMemory}) {
    SCOPED_TRACE(static_cast<int>(code));
    StepGraph graph(dev, StepGraphKey(request, {Shape{3}}), step);
    graph.begin_request(request);
    const int64_t replays = ops::device_graph_replays();
    EXPECT_EQ(graph.run({on_placement_device({1, 1, 1})}).tensors[0].to_vector(), (std::vector<float>{2, 4, 6}));
    ops::DeviceGraph::fail_next_stand_in_recording(code);
    for (int i = 0; i < 3; ++i) {
      const StepGraph::Outputs out = graph.run({on_placement_device({2, 2, 2})});
      EXPECT_FALSE(out.replayed);
      EXPECT_EQ(out.tensors[0].to_vector(), (std::vector<float>{3, 6, 9}));
    }
    EXPECT_EQ(ops::device_graph_replays(), replays);
  }
  StepGraph graph(dev, StepGraphKey(request, {Shape{3}}), step);
  graph.begin_request(request);
  graph.run({on_placement_device({1, 1, 1})});
  ops::DeviceGraph::fail_next_stand_in_recording(ErrorCode::InvalidArgument);
  EXPECT_THROW(graph.run({on_placement_device({1, 1, 1})}), Error);
}

// The cache's bookkeeping: a graph taken out is not handed to a second request of its shape (that
// one gets a fresh graph; of the two given back the newer is kept), beyond kCapacity shapes the
// least recently given back is dropped, and a device out of memory takes every kept graph.
TEST(StepGraph, CacheLendsEachGraphToOneRequestAndKeepsTheRecentShapes) {
  const Device dev = Device::placement_check();
  auto key = [](int64_t tokens) {
    return StepGraphKey({Tensor::empty({1, 32, 64}, DType::BF16)}, {Shape{1, tokens, 128}});
  };
  auto make = [&](int64_t tokens) {
    return [&, tokens] {
      return std::make_unique<StepGraph>(
          dev, key(tokens), [](const std::vector<Tensor>&, const std::vector<Tensor>& s) { return s; });
    };
  };
  StepGraphCache cache(dev);
  std::unique_ptr<StepGraph> a = cache.acquire(key(16), make(16)), b = cache.acquire(key(16), make(16));
  EXPECT_NE(a.get(), b.get()) << "a lent graph must not be lent again";
  const StepGraph* newer = b.get();
  cache.release(std::move(a));
  cache.release(std::move(b));
  EXPECT_EQ(cache.size(), 1u);
  std::unique_ptr<StepGraph> again = cache.acquire(key(16), make(16));
  EXPECT_EQ(again.get(), newer);
  cache.release(std::move(again));
  static_assert(StepGraphCache::kCapacity == 2, "the shapes below fill the cache");
  std::unique_ptr<StepGraph> g32 = cache.acquire(key(32), make(32));
  const StepGraph* kept32 = g32.get();
  cache.release(std::move(g32));
  cache.release(cache.acquire(key(64), make(64)));
  EXPECT_EQ(cache.size(), 2u);
  const std::unique_ptr<StepGraph> fresh = cache.acquire(key(16), make(16));
  EXPECT_EQ(cache.size(), 2u) << "the least recent shape (16 tokens) was dropped: its graph is a new one";
  EXPECT_EQ(cache.acquire(key(32), make(32)).get(), kept32);
  EXPECT_EQ(cache.size(), 1u);
  // Out of memory on another device: nothing to give; on this one: every kept graph goes (the
  // lent one stays with its request).
  const std::unique_ptr<StepGraph> lent = cache.acquire(key(64), make(64));
  cache.release(cache.acquire(key(128), make(128)));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_FALSE(reclaim_device_memory(Device::placement_check(2)));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(reclaim_device_memory(dev));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(reclaim_device_memory(dev)) << "nothing left to give";
  EXPECT_FALSE(key(16) == key(32));
  EXPECT_FALSE(StepGraphKey({Tensor()}, {Shape{1}}) ==
               StepGraphKey({Tensor::empty({1}, DType::F32)}, {Shape{1}}))
      << "an undefined request input is a shape of its own";
}

// Low-memory mode makes the transformer per request, so nothing is kept: each request records its
// own graph again.
TEST(StepGraph, LowMemoryRecordsPerRequest) {
  PipelineOptions o = options_on(Device::placement_check(), DType::BF16, true);
  o.low_memory = true;
  auto pipe = Flux2KleinPipeline::load(kData / "models" / "flux2-klein-tiny", o);
  EXPECT_EQ(pipe->generate(request(7, 3)).graph_steps, 2);
  EXPECT_EQ(pipe->generate(request(8, 3)).graph_steps, 2);
}

// A cancelled request does not give its graph back (it may have stopped anywhere), and the next
// request of that shape still matches the direct run.
TEST(StepGraph, CancelledRequestLeavesTheNextOneIntact) {
  const fs::path model = kData / "models" / "flux2-klein-tiny";
  auto graphed = Flux2KleinPipeline::load(model, options_on(Device::placement_check(), DType::BF16, true));
  std::atomic<bool> cancel{false};
  GenerateRequest r = request(4, 4);
  CallContext call;
  call.cancel = &cancel;
  call.on_step = [&](int step, int, double, float) { cancel = step == 2; };
  EXPECT_THROW(graphed->generate(r, call), Error);
  cancel = false;
  const GenerateResult g = graphed->generate(r);
  EXPECT_EQ(g.graph_steps, 3) << "the cancelled request's graph was dropped: this one records anew";
  auto direct = Flux2KleinPipeline::load(model, options_on(Device::placement_check(), DType::BF16, false));
  test::expect_same_generation(direct->generate(r), g);
}

}  // namespace
}  // namespace fluxrt::pipelines
