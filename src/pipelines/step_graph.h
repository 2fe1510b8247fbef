#pragma once
// The transformer call(s) of one denoising step (the conditional one, and the unconditional one
// under CFG) as recorded device work (ops::DeviceGraph), for PipelineOptions::cuda_graphs; both
// pipelines (klein, FLUX.1) give it their step as a function of tensors.
//
// A graph is made for one request shape (StepGraphKey) and kept across requests of that shape
// (StepGraphCache): its first call runs eagerly (it fills every first-use cache — library
// handles, workspaces, algorithm choices — outside the recording, and its outputs give the
// buffers' shapes), its second records the work on fixed buffers, and every later call, in this
// request or a later one, copies its inputs into those buffers and replays. Inputs come in two
// kinds: a request's (prompt embeddings, RoPE tables...: copied in once per request) and a step's
// (latents, timestep projection: copied in before each replay). A recording that fails (an op
// that cannot be captured) is logged once and the graph runs eagerly from then on; on a device
// without graphs (plain cpu) every call runs eagerly.
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "core/device_memory.h"
#include "core/tensor.h"
#include "ops/device_graph.h"

namespace fluxrt::pipelines {

// What fixes a step graph's buffers: every request input's shape and dtype (an undefined one, the
// negative prompt without CFG say, counts as such) and the step inputs' shapes.
class StepGraphKey {
 public:
  StepGraphKey(const std::vector<Tensor>& request_inputs, std::vector<Shape> step_shapes);
  bool operator==(const StepGraphKey& other) const = default;
  const std::vector<Shape>& step_shapes() const { return step_shapes_; }

 private:
  std::vector<std::tuple<bool, Shape, DType>> request_;
  std::vector<Shape> step_shapes_;
};

class StepGraph {
 public:
  // The step's device work: outputs from the request inputs and the step inputs, reading nothing
  // else but weights (it is recorded once and replayed on the buffers' later contents).
  using Fn =
      std::function<std::vector<Tensor>(const std::vector<Tensor>& request, const std::vector<Tensor>& step)>;

  StepGraph(Device device, StepGraphKey key, Fn fn);
  // The recorded work refers to this object's buffers (and, on cpu:N, to the object itself).
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  const StepGraphKey& key() const { return key_; }

  // Copies one request's inputs (on the device; of the key's shapes) into the graph's buffers.
  void begin_request(const std::vector<Tensor>& request_inputs);

  struct Outputs {
    std::vector<Tensor> tensors;
    bool replayed = false;
  };
  // The step's outputs for `step_inputs` (on the device; of the key's shapes). Replayed outputs
  // are the graph's buffers: read them before the next call.
  Outputs run(const std::vector<Tensor>& step_inputs);

 private:
  Device device_;
  StepGraphKey key_;
  Fn fn_;
  std::vector<Tensor> request_;         // this request's inputs, in the graph's buffers
  std::vector<Tensor> step_, outputs_;  // per-step buffers, sized by the first call
  std::optional<ops::DeviceGraph> graph_;
  bool eager_only_ = false;  // no graphs on this device, or recording failed
};

// The step graphs of one resident transformer, one per request shape, the most recently used
// kept (a graph holds its own device memory for the step's intermediates, so only a few). A
// request takes its graph out (acquire) and gives it back when its loop completed (release), so
// concurrent requests of one shape never share buffers: the second gets a fresh graph. When the
// device runs out of memory (a later VAE decode, another pipeline), the backend asks the cache to
// drop the graphs it keeps (core/device_memory.h MemoryReclaimer) before it fails.
class StepGraphCache {
 public:
  static constexpr size_t kCapacity = 2;

  explicit StepGraphCache(Device device);

  // The kept graph of `key`, or make()'s.
  std::unique_ptr<StepGraph> acquire(const StepGraphKey& key,
                                     const std::function<std::unique_ptr<StepGraph>()>& make);
  void release(std::unique_ptr<StepGraph> graph);
  size_t size() const;

 private:
  Device device_;
  mutable std::mutex mutex_;
  std::list<std::unique_ptr<StepGraph>> graphs_;  // most recently released first
  MemoryReclaimer reclaimer_;                     // last: unregistered before the graphs go
};

// A request's step graph, bound to its inputs (begin_request): the kept graph of its shape from
// `cache`, else a new one (`cache` null, low-memory mode: this request's own). Give it back with
// cache->release() once the loop completed.
std::unique_ptr<StepGraph> bind_step_graph(StepGraphCache* cache, Device device,
                                           const std::vector<Tensor>& request_inputs,
                                           std::vector<Shape> step_shapes, const StepGraph::Fn& step);

}  // namespace fluxrt::pipelines
