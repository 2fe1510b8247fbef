#include "pipelines/denoise.h"

#include <algorithm>
#include <utility>

#include "core/allocator.h"
#include "core/error.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "pipelines/spans.h"

namespace fluxrt::pipelines {

Tensor combine_guidance(const Tensor& v_pos, const Tensor& v_neg, float scale) {
  const Tensor diff = ops::add(v_pos, ops::scale(v_neg, -1.0f));  // negation is exact
  return ops::add(v_neg, ops::scale(diff, scale));
}

void check_cancel(const CallContext& call, const char* who, const char* where) {
  if (call.cancel && call.cancel->load(std::memory_order_relaxed))
    fail(ErrorCode::Cancelled, "{}: cancelled {}", who, where);
}

namespace {
constexpr size_t kStepBlocksKeptAfterLoop = size_t{1} << 30;
}  // namespace

DenoiseOutcome denoise(Tensor latents, DenoiseLoop loop, const DenoiseModel& model) {
  const CallContext& call = *loop.call;
  const Schedule& schedule = *loop.schedule;
  const int steps = schedule.num_steps();
  const bool guided = loop.guidance_scale.has_value();
  Profiler* prof = loop.profiler;
  DenoiseOutcome out;
  // The kernels' one-time work (oneDNN primitives and weight layouts for these shapes, scratch)
  // before the first step rather than inside it: one forward that computes nothing. A replayed
  // graph has done its own at recording.
  if (!loop.graph && loop.first_step < steps && ops::ScopedKernelPlanning::available(loop.device)) {
    ScopedTimer span(prof, kSpanKernelPlanning);
    const Tensor timestep =
        Tensor::full({loop.batch}, loop.latent_dtype,
                     model_timestep(schedule.timesteps[loop.first_step], loop.latent_dtype));
    ops::ScopedKernelPlanning planning(loop.device);
    (void)model.forward(model.input(latents), timestep);
  }
  Stopwatch total;
  for (int i = loop.first_step; i < steps; ++i) {
    check_cancel(call, loop.who, "between denoising steps");
    Stopwatch step_watch;
    // timestep = t.expand(B).to(latents.dtype) / 1000
    const Tensor timestep = Tensor::full({loop.batch}, loop.latent_dtype,
                                         model_timestep(schedule.timesteps[i], loop.latent_dtype));
    const Tensor input = model.input(latents);
    std::vector<Tensor> v;
    if (loop.graph) {
      StepGraph::Outputs replay = loop.graph->run({input, model.timestep_projection(timestep)});
      v = std::move(replay.tensors);
      out.graph_steps += replay.replayed;
    } else {
      if (loop.step_cache) loop.step_cache->begin_step();
      v = model.forward(input, timestep);
      if (loop.step_cache) loop.step_cache->end_step();
    }
    FLUXRT_CHECK(v.size() == (guided ? 2u : 1u), ErrorCode::Internal,
                 "denoise: {} velocities for {} guidance", v.size(), guided ? "with" : "without");
    // Only the noise tokens are denoised; the reference tokens' rows come back unused.
    for (Tensor& velocity : v)
      if (velocity.size(1) != latents.size(1)) velocity = velocity.narrow(1, 0, latents.size(1)).contiguous();
    const Tensor velocity = guided ? combine_guidance(v[0], v[1], *loop.guidance_scale) : v[0];
    const int step = i - loop.first_step + 1;
    const bool preview = call.on_preview && std::find(call.preview_steps.begin(), call.preview_steps.end(),
                                                      step) != call.preview_steps.end();
    std::vector<io::Image> previews;
    if (preview && loop.previewer && loop.previewer->ready())
      previews = loop.previewer->preview(predicted_clean_latents(latents, velocity, schedule.sigmas[i]),
                                         loop.grid_h, loop.grid_w, loop.width, loop.height);
    latents = euler_step(latents, velocity, schedule, i);
    if (loop.after_step) latents = loop.after_step(i, std::move(latents));
    // A step's time is the device's: the Euler step no longer downloads, so wait here, only
    // when someone reads the time (no per-step synchronisation otherwise).
    if (prof || call.on_step) ops::synchronize(loop.device);
    const double seconds = step_watch.seconds();
    if (prof) prof->add(kSpanDenoiseStep, seconds);
    if (preview) call.on_preview(step, std::move(previews));
    if (call.on_step) call.on_step(step, steps - loop.first_step, seconds, schedule.timesteps[i]);
  }
  if (prof) prof->add(kSpanDenoiseTotal, total.seconds());
  // Back for the next request of this shape only after a whole loop.
  if (loop.graph && loop.graph_cache) loop.graph_cache->release(std::move(loop.graph));
  out.latents = std::move(latents);
  // The allocator's block cache may hold up to 4 GiB of the steps' activations (at 1024x1024 a
  // klein-4B step cycles through ~2 GiB of them); the VAE decode that follows allocates other
  // sizes, so all but the 1 GiB a 512x512 step needs go back to the OS before it. The next
  // request's first step faults the rest in again, once.
  trim_cached_host_blocks(kStepBlocksKeptAfterLoop);
  return out;
}

}  // namespace fluxrt::pipelines
