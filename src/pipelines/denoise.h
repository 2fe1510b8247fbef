#pragma once
// The denoising loop both pipelines run (diffusers' `for i, t in enumerate(timesteps)` of
// FluxPipeline and Flux2KleinPipeline): per step a cancel check, the timestep in the latent
// dtype, the transformer call(s) — replayed from a step graph when there is one, else eager —,
// guidance between the conditional and the unconditional velocity, the Euler update, the step's
// time for the profiler and the progress callback. What differs per family is the transformer
// call, given as a DenoiseModel.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "pipelines/latent_preview.h"
#include "pipelines/pipeline.h"
#include "pipelines/schedule.h"
#include "pipelines/step_cache.h"
#include "pipelines/step_graph.h"

namespace fluxrt::pipelines {

struct DenoiseModel {
  // The transformer input of a step from the latents [B, L, C] (klein appends the reference
  // tokens), in the model dtype.
  std::function<Tensor(const Tensor& latents)> input;
  // The eager call: the conditional velocity, then the unconditional one under guidance, for an
  // input and the timesteps [B] (model_timestep values in the latent dtype).
  std::function<std::vector<Tensor>(const Tensor& input, const Tensor& timesteps)> forward;
  // The graph path's step input besides the transformer input: the timesteps' projection.
  std::function<Tensor(const Tensor& timesteps)> timestep_projection;
};

struct DenoiseLoop {
  const Schedule* schedule = nullptr;
  int first_step = 0;  // img2img starts inside the schedule
  DType latent_dtype = DType::BF16;
  int64_t batch = 1;
  // Set: two velocities per step, combined as v_neg + scale * (v_pos - v_neg).
  std::optional<float> guidance_scale;
  // With cuda_graphs: the request's bound graph (bind_step_graph), given back to `graph_cache`
  // (when set) after the whole loop; a failed or cancelled loop drops it.
  std::unique_ptr<StepGraph> graph;
  StepGraphCache* graph_cache = nullptr;
  // The request's step cache (its hooks are live between its begin_step and end_step, which the
  // loop calls around each step's transformer calls), or null.
  StepCache* step_cache = nullptr;
  Device device = Device::cpu();
  Profiler* profiler = nullptr;              // kSpanDenoiseStep per step, kSpanDenoiseTotal
  const CallContext* call = nullptr;         // its on_step, cancel and previews
  // For the request's previews: the colour map and the token grid (rows x columns, raster order)
  // with the output size the previews are scaled to.
  const LatentPreviewer* previewer = nullptr;
  int64_t grid_h = 0, grid_w = 0;
  int width = 0, height = 0;
  const char* who = "pipeline";              // names the pipeline in the cancellation message
  // Runs after each step's Euler update with the schedule index i and returns the latents the
  // next step starts from: inpainting puts the kept region back (re-noised to sigma i + 1). Unset:
  // the updated latents as they are.
  std::function<Tensor(int i, Tensor latents)> after_step;
};

// v_neg + scale * (v_pos - v_neg) as torch evaluates it on tensors of the model dtype: each op
// rounds to that dtype, the Python-float scale is applied in f32.
Tensor combine_guidance(const Tensor& v_pos, const Tensor& v_neg, float scale);

// Throws Error(Cancelled) "<who>: cancelled <where>" when the call's cancel flag is set.
void check_cancel(const CallContext& call, const char* who, const char* where);

struct DenoiseOutcome {
  Tensor latents;       // [B, L, C] after the last step, on the device
  int graph_steps = 0;  // steps whose transformer calls were replayed
};

// Runs schedule steps first_step .. num_steps - 1 from `latents` [B, L, C] (on the device).
// Velocity rows beyond the latents' (reference tokens) are dropped before guidance and Euler.
DenoiseOutcome denoise(Tensor latents, DenoiseLoop loop, const DenoiseModel& model);

}  // namespace fluxrt::pipelines
