#pragma once
// The transformer call(s) of one klein denoising step (the conditional one, and the unconditional
// one under CFG) as recorded device work (ops::DeviceGraph), for PipelineOptions::cuda_graphs.
//
// The first step runs eagerly: it fills every first-use cache (library handles, workspaces,
// algorithm choices) outside the recording, and its outputs give the buffers' shapes. The second
// records the work on fixed buffers (latents in, timestep projection in, velocities out; the
// prompt embeddings and RoPE tables are the request's own tensors, fixed for its whole loop), and
// it and every later step copy their inputs into those buffers and replay. A recording that fails
// (an op that cannot be captured) is logged once and the rest of the request runs eagerly; on a
// device without graphs (plain cpu) every step runs eagerly.
#include <optional>
#include <utility>

#include "core/tensor.h"
#include "models/flux/flux2_transformer.h"
#include "ops/device_graph.h"

namespace fluxrt::pipelines {

class KleinStepGraph {
 public:
  // `ctx` / `negative_ctx` [B, Lt, C] on the device for the whole loop (negative undefined
  // without CFG); `x_ids` / `ctx_ids` as Flux2Transformer::forward takes them.
  KleinStepGraph(const models::Flux2Transformer& transformer, Device device, const Tensor& x_ids,
                 const Tensor& ctx_ids, Tensor ctx, Tensor negative_ctx);
  // The recorded work refers to this object's buffers (and, on cpu:N, to the object itself).
  KleinStepGraph(const KleinStepGraph&) = delete;
  KleinStepGraph& operator=(const KleinStepGraph&) = delete;

  struct Velocities {
    Tensor cond, uncond;  // uncond undefined without CFG
    bool replayed = false;
  };
  // The velocities for `input` [B, Li, C] (on the device) at `timesteps` [B] (host). Replayed
  // outputs are the graph's buffers: read them before the next call.
  Velocities run(const Tensor& input, const Tensor& timesteps);

 private:
  Velocities eager(const Tensor& input, const Tensor& proj) const;

  const models::Flux2Transformer& transformer_;
  Device device_;
  models::Flux2Transformer::Rope rope_;
  Tensor ctx_, negative_ctx_;
  Tensor input_, proj_, cond_, uncond_;  // the recorded work's fixed buffers
  std::optional<ops::DeviceGraph> graph_;
  bool eager_only_ = false;  // no graphs on this device, or recording failed
};

}  // namespace fluxrt::pipelines
