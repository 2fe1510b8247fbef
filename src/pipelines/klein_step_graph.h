#pragma once
// The transformer call(s) of one klein denoising step (the conditional one, and the unconditional
// one under CFG) as recorded device work (ops::DeviceGraph), for PipelineOptions::cuda_graphs.
//
// A graph is made for one request shape (StepGraphKey) and kept across requests of that shape:
// its first call runs eagerly (it fills every first-use cache — library handles, workspaces,
// algorithm choices — outside the recording, and its outputs give the buffers' shapes), its second
// records the work on fixed buffers (latents, timestep projection, prompt embeddings and RoPE
// tables in; velocities out), and every later call, in this request or a later one, copies its
// inputs into those buffers and replays. A recording that fails (an op that cannot be captured)
// is logged once and the graph runs eagerly from then on; on a device without graphs (plain cpu)
// every call runs eagerly.
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <optional>

#include "core/tensor.h"
#include "models/flux/flux2_transformer.h"
#include "ops/device_graph.h"

namespace fluxrt::pipelines {

// What fixes a step graph's buffers: a request with the same key can replay it.
struct StepGraphKey {
  Shape input;            // [B, Li (+ reference tokens), C] in the transformer's dtype
  Shape ctx;              // [B, Lt, text width]
  bool cfg = false;       // a second (unconditional) forward per step
  Shape x_ids, ctx_ids;   // the position ids the RoPE tables come from
  bool operator==(const StepGraphKey& o) const {
    return input == o.input && ctx == o.ctx && cfg == o.cfg && x_ids == o.x_ids && ctx_ids == o.ctx_ids;
  }
};

class KleinStepGraph {
 public:
  KleinStepGraph(const models::Flux2Transformer& transformer, Device device, StepGraphKey key);
  // The recorded work refers to this object's buffers (and, on cpu:N, to the object itself).
  KleinStepGraph(const KleinStepGraph&) = delete;
  KleinStepGraph& operator=(const KleinStepGraph&) = delete;

  const StepGraphKey& key() const { return key_; }

  // Binds one request's prompt embeddings ([B, Lt, C] on the device; negative undefined without
  // CFG) and position ids (as Flux2Transformer::forward takes them), copied into the graph's
  // buffers. Their shapes must be the key's.
  void begin_request(const Tensor& x_ids, const Tensor& ctx_ids, const Tensor& ctx, const Tensor& negative_ctx);

  struct Velocities {
    Tensor cond, uncond;  // uncond undefined without CFG
    bool replayed = false;
  };
  // The velocities for `input` (key().input, on the device) at `timesteps` [B] (host). Replayed
  // outputs are the graph's buffers: read them before the next call.
  Velocities run(const Tensor& input, const Tensor& timesteps);

 private:
  Velocities eager(const Tensor& input, const Tensor& proj) const;

  const models::Flux2Transformer& transformer_;
  Device device_;
  StepGraphKey key_;
  // The request's inputs, fixed for the whole loop: the recorded work reads them.
  models::Flux2Transformer::Rope rope_;
  Tensor ctx_, negative_ctx_;
  Tensor input_, proj_, cond_, uncond_;  // per-step buffers, sized by the first call
  std::optional<ops::DeviceGraph> graph_;
  bool eager_only_ = false;  // no graphs on this device, or recording failed
};

// The step graphs of one resident transformer, one per request shape, the most recently used
// kept (a graph holds its own device memory for the step's intermediates, so only a few). A
// request takes its graph out (acquire) and gives it back when its loop completed (release), so
// concurrent requests of one shape never share buffers: the second gets a fresh graph.
class StepGraphCache {
 public:
  static constexpr size_t kCapacity = 2;

  explicit StepGraphCache(const models::Flux2Transformer& transformer, Device device)
      : transformer_(transformer), device_(device) {}

  std::unique_ptr<KleinStepGraph> acquire(const StepGraphKey& key);
  void release(std::unique_ptr<KleinStepGraph> graph);
  size_t size() const;

 private:
  const models::Flux2Transformer& transformer_;
  Device device_;
  mutable std::mutex mutex_;
  std::list<std::unique_ptr<KleinStepGraph>> graphs_;  // most recently released first
};

}  // namespace fluxrt::pipelines
