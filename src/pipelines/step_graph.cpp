#include "pipelines/step_graph.h"

#include <iterator>
#include <utility>

#include "core/error.h"
#include "core/log.h"

namespace fluxrt::pipelines {

StepGraphKey::StepGraphKey(const std::vector<Tensor>& request_inputs, std::vector<Shape> step_shapes)
    : step_shapes_(std::move(step_shapes)) {
  for (const Tensor& t : request_inputs)
    request_.emplace_back(t.defined(), t.defined() ? t.shape() : Shape{},
                          t.defined() ? t.dtype() : DType::F32);
}

StepGraph::StepGraph(Device device, StepGraphKey key, Fn fn)
    : device_(device),
      key_(std::move(key)),
      fn_(std::move(fn)),
      eager_only_(!ops::DeviceGraph::available(device)) {}

void StepGraph::begin_request(const std::vector<Tensor>& request_inputs) {
  FLUXRT_CHECK(StepGraphKey(request_inputs, key_.step_shapes()) == key_, ErrorCode::Internal,
               "[graph] request inputs do not match the step graph's");
  request_.resize(request_inputs.size());
  for (size_t i = 0; i < request_inputs.size(); ++i) {
    const Tensor& src = request_inputs[i];
    if (!src.defined()) continue;
    // Into the buffer the recorded work reads (a fresh one for the graph's first request).
    if (!request_[i].defined()) request_[i] = Tensor::empty(src.shape(), src.dtype(), device_);
    request_[i].copy_from(src);
  }
}

StepGraph::Outputs StepGraph::run(const std::vector<Tensor>& step_inputs) {
  FLUXRT_CHECK(!request_.empty(), ErrorCode::Internal, "[graph] run before begin_request");
  FLUXRT_CHECK(step_inputs.size() == key_.step_shapes().size(), ErrorCode::Internal,
               "[graph] {} step inputs, expected {}", step_inputs.size(), key_.step_shapes().size());
  for (size_t i = 0; i < step_inputs.size(); ++i)
    FLUXRT_CHECK(step_inputs[i].shape() == key_.step_shapes()[i], ErrorCode::InvalidArgument,
                 "[graph] step input {} is {}, the graph's is {}", i, step_inputs[i].str(),
                 key_.step_shapes()[i].str());
  if (eager_only_) return {fn_(request_, step_inputs), false};
  if (step_.empty()) {  // the first call
    std::vector<Tensor> out = fn_(request_, step_inputs);
    // Buffers of this call's shapes, for the recorded work to read its inputs from and write its
    // results into.
    for (const Tensor& t : step_inputs) step_.push_back(Tensor::empty(t.shape(), t.dtype(), device_));
    for (const Tensor& t : out) outputs_.push_back(Tensor::empty(t.shape(), t.dtype(), device_));
    return {std::move(out), false};
  }
  for (size_t i = 0; i < step_inputs.size(); ++i)
    FLUXRT_CHECK(step_inputs[i].dtype() == step_[i].dtype(), ErrorCode::InvalidArgument,
                 "[graph] step input {} changed from {}", step_inputs[i].str(), step_[i].str());
  if (!graph_) {
    try {
      // The step's temporaries are allocated and freed inside the recording; only the buffers and
      // the weights are read from outside it.
      graph_ = ops::DeviceGraph::record(device_, [this] {
        const std::vector<Tensor> out = fn_(request_, step_);
        FLUXRT_CHECK(out.size() == outputs_.size(), ErrorCode::Internal,
                     "[graph] the step's outputs changed");
        for (size_t i = 0; i < out.size(); ++i) outputs_[i].copy_from(out[i]);
      });
    } catch (const Error& e) {
      // A recording the device refused (an op that synchronises) or could not give memory to (the
      // graph's own copy of the step's intermediates): the steps run directly, as without graphs.
      if (e.code() != ErrorCode::Device && e.code() != ErrorCode::OutOfMemory) throw;
      FLUXRT_LOG_WARN("CUDA graph for the denoising step not used: {}; running the steps directly", e.what());
      eager_only_ = true;
      step_.clear();
      outputs_.clear();
      return {fn_(request_, step_inputs), false};
    }
  }
  for (size_t i = 0; i < step_inputs.size(); ++i) step_[i].copy_from(step_inputs[i]);
  graph_->replay();
  return {outputs_, true};
}

StepGraphCache::StepGraphCache(Device device)
    : device_(device), reclaimer_([this](Device d) {
        std::list<std::unique_ptr<StepGraph>> dropped;  // destroyed after the lock is released
        if (d != device_) return false;
        std::lock_guard<std::mutex> lock(mutex_);
        dropped.swap(graphs_);
        return !dropped.empty();
      }) {}

std::unique_ptr<StepGraph> StepGraphCache::acquire(const StepGraphKey& key,
                                                   const std::function<std::unique_ptr<StepGraph>()>& make) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if ((*it)->key() == key) {
        std::unique_ptr<StepGraph> g = std::move(*it);
        graphs_.erase(it);
        return g;
      }
    }
  }
  return make();
}

void StepGraphCache::release(std::unique_ptr<StepGraph> graph) {
  // Graphs (and their device memory) leave the list under the lock and are destroyed after it.
  std::list<std::unique_ptr<StepGraph>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // A concurrent request of the same shape made its own graph: keep the newer one.
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if ((*it)->key() == graph->key()) {
        dropped.splice(dropped.end(), graphs_, it);
        break;
      }
    }
    graphs_.push_front(std::move(graph));
    while (graphs_.size() > kCapacity) dropped.splice(dropped.end(), graphs_, std::prev(graphs_.end()));
  }
}

size_t StepGraphCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return graphs_.size();
}

std::unique_ptr<StepGraph> bind_step_graph(StepGraphCache* cache, Device device,
                                           const std::vector<Tensor>& request_inputs,
                                           std::vector<Shape> step_shapes, const StepGraph::Fn& step) {
  const StepGraphKey key(request_inputs, std::move(step_shapes));
  auto make = [&] { return std::make_unique<StepGraph>(device, key, step); };
  std::unique_ptr<StepGraph> graph = cache ? cache->acquire(key, make) : make();
  graph->begin_request(request_inputs);
  return graph;
}

}  // namespace fluxrt::pipelines
