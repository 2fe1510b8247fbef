#pragma once
// Shared by the pipeline tests that run one pipeline two ways (cpu vs a placement-check device,
// direct vs recorded steps) and expect the same run.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/tensor.h"
#include "ops/device_graph.h"
#include "pipelines/klein/flux2_klein_pipeline.h"

namespace fluxrt::test {

// Sequential loading (bitwise comparisons do not need the parallel load, and it keeps the tests'
// threads to themselves); recorded steps (PipelineOptions::cuda_graphs) when asked.
inline pipelines::PipelineOptions options_on(Device device, DType dtype, bool cuda_graphs = false) {
  pipelines::PipelineOptions o;
  o.dtype = dtype;
  o.device = device;
  o.parallel_load = false;
  o.cuda_graphs = cuda_graphs;
  return o;
}

// The same images (size and pixels) and bitwise-equal final latents.
inline void expect_same_generation(const pipelines::GenerateResult& a, const pipelines::GenerateResult& b) {
  ASSERT_EQ(a.images.size(), b.images.size());
  for (size_t i = 0; i < a.images.size(); ++i) {
    EXPECT_EQ(a.images[i].width, b.images[i].width);
    EXPECT_EQ(a.images[i].height, b.images[i].height);
    EXPECT_TRUE(a.images[i].pixels == b.images[i].pixels) << "image " << i << " differs";
  }
  ASSERT_TRUE(a.final_latents.defined() && b.final_latents.defined());
  const Tensor x = a.final_latents.contiguous(), y = b.final_latents.contiguous();
  ASSERT_EQ(x.shape(), y.shape());
  ASSERT_EQ(x.dtype(), y.dtype());
  EXPECT_EQ(0, std::memcmp(x.raw_data(), y.raw_data(), x.nbytes())) << "final latents differ";
}

// Runs `r` (with `call`) on two pipelines of `model` on `device` (Flux2KleinPipeline or Flux1Pipeline), one
// running every step directly and one recording them: the same generation, and the graph replays
// the process made are the steps the result says replayed. Returns the graphed result.
template <typename Pipeline>
pipelines::GenerateResult expect_graphs_change_nothing(const std::filesystem::path& model, Device device,
                                                       DType dtype, const fluxrt::GenerateRequest& r,
                                                       const pipelines::CallContext& call = {}) {
  const pipelines::GenerateResult direct =
      Pipeline::load(model, options_on(device, dtype))->generate(r, call);
  EXPECT_EQ(direct.graph_steps, 0);
  const int64_t replays_before = ops::device_graph_replays();
  const pipelines::GenerateResult graphed =
      Pipeline::load(model, options_on(device, dtype, true))->generate(r, call);
  expect_same_generation(direct, graphed);
  EXPECT_EQ(ops::device_graph_replays() - replays_before, graphed.graph_steps);
  return graphed;
}

// Records, at the end of every denoising step, how many device -> host copies the process has made
// so far; the counts between the first and the last step must not grow: the transformer, CFG and
// the Euler update stay on the device (on cpu:1 every copy into cpu memory is counted).
struct StepDownloads {
  std::vector<uint64_t> at_step;
  void attach(pipelines::CallContext& call) {
    call.on_step = [this](int, int, double, float) { at_step.push_back(device_to_host_copies()); };
  }
  void expect_none_between_steps() const {
    ASSERT_GE(at_step.size(), 2u) << "needs two steps or more";
    EXPECT_EQ(at_step.front(), at_step.back())
        << "the step loop copied " << at_step.back() - at_step.front() << " tensors to the host over "
        << at_step.size() - 1 << " steps";
  }
};

}  // namespace fluxrt::test
